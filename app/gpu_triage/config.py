"""Configuration: built-in defaults, overridden by one TOML file.

Which file: ``--config FILE``, else ``$GPU_TRIAGE_CONFIG``, else ``$XDG_CONFIG_HOME/gpu-triage/config.toml``
(``~/.config/gpu-triage/config.toml``), else none. Command-line options override the file.
A bad value raises :class:`~gpu_triage.errors.UserError` naming the file, the key and what is allowed.
See config.example.toml for every key.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import reprlib
import stat
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_triage.diagnosis.thresholds import DEFAULT_WINDOW_S, Thresholds
from gpu_triage.errors import UserError, user_path
from gpu_triage.sources.dumpbudget import DUMPS_PER_MIN, DUMPS_PER_MIN_RANGE, InsideSettings
from gpu_triage.sources.waiting import WaitBand

log = logging.getLogger(__name__)

THEMES = (
    "textual-dark",
    "textual-light",
    "nord",
    "gruvbox",
    "dracula",
    "monokai",
    "tokyo-night",
    "catppuccin-mocha",
    "solarized-light",
)


# What a tick interval and a window can be, in the config file and on the command line alike. Below 50 ms
# NVML's own sampling is the limit; a window past a week of ticks is memory the ring buffers would take.
INTERVAL_RANGE_S = (0.05, 3600.0)
WINDOW_RANGE_S = (1.0, 7 * 86400.0)


# The main screen's panes under the header, in their default order; [ui] panes names the ones shown, in order
PANES = ("gpu", "job", "diag", "cpu", "disk", "procs")


@dataclass(slots=True)
class Config:
    interval_s: float = 2.0
    window_s: float = DEFAULT_WINDOW_S
    thresholds: Thresholds = field(default_factory=Thresholds)
    theme: str = "textual-dark"
    color_gpu: str = "green"  # GPU-Util waveform
    color_sm: str = "cyan"  # SM activity waveform
    color_alert: str = "red"
    panes: tuple[str, ...] = PANES  # [ui] panes: shown, in this order (the `o` key changes it for the session)
    recording_dir: Path = Path("~/.local/share/gpu-triage/recordings").expanduser()
    path: Path | None = None  # the file these values came from, if any
    job_batch_size: int | None = None  # [job] batch_size: samples per step, for logs that count steps
    job_log_regex: str | None = None  # [job] log_regex: the user's progress line, named groups
    inside_enabled: bool = True  # [inside] enabled: py-spy looks inside the processes whose card waits (live)
    inside_enter_pct: float = 45.0  # [inside] waiting_enter_pct: a card below this GPU-Util starts waiting
    inside_leave_pct: float = 55.0  # [inside] waiting_leave_pct: a waiting card above this stops waiting
    inside_dumps_per_min: int = DUMPS_PER_MIN  # [inside] dumps_per_min: py-spy runs a minute, all processes together

    @property
    def window_ticks(self) -> int:
        return max(2, round(self.window_s / self.interval_s))


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpu-triage" / "config.toml"


def _config_file(p: Path, given: str, fix: str) -> Path:
    """``p`` when it is a regular file; else UserError saying what it is instead (``stat`` only: a FIFO
    given as the config is never opened, a directory is not called missing, a name too long is one line)."""
    try:
        st = p.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise UserError(f"config file {p}{given} does not exist: {fix}") from None
    except OSError as exc:
        raise UserError(f"config file {str(p)[:120]}{given}: cannot read ({exc.strerror or exc}): {fix}") from exc
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"config file {p}{given} is a directory: give the TOML file in it, e.g. {p / 'config.toml'}")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"config file {p}{given} is not a regular file (a FIFO or a device?): give a TOML file")
    return p


def find_config_file(cli_path: str | None) -> Path | None:
    if cli_path:
        return _config_file(user_path(cli_path, "--config"), "", "check the path given to --config")
    env = os.environ.get("GPU_TRIAGE_CONFIG")
    if env:
        path = user_path(env, "$GPU_TRIAGE_CONFIG")
        return _config_file(path, " (from $GPU_TRIAGE_CONFIG)", "fix or unset the variable")
    p = default_config_path()
    return p if p.is_file() else None


def load_config(cli_path: str | None = None) -> Config:
    path = find_config_file(cli_path)
    if path is None:
        log.debug("no config file: defaults")
        return Config()
    log.info("config from %s", path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML ({exc}): fix the file or remove it") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read ({exc})") from exc
    except (ValueError, RecursionError) as exc:  # tomllib's own limits: an integer of 5,000 digits, [[[[…
        raise UserError(f"{path}: not valid TOML ({str(exc)[:120]}): fix the file or remove it") from exc
    return parse_config(data, path)


_SECTIONS = {
    "sampling": {"interval_s", "window_s"},
    "diagnosis": set(Thresholds.keys()),
    "ui": {"theme", "color_gpu", "color_sm", "color_alert", "panes"},
    "recording": {"directory"},
    "job": {"batch_size", "log_regex"},
    "inside": {"enabled", "waiting_enter_pct", "waiting_leave_pct", "dumps_per_min"},
}


# Upper bounds of what a threshold can mean: a percentage, a share, a correlation. Exact keys first, then
# suffixes. The defaults are far inside them; these only catch typos (mem_held_frac = 10 for 10 %).
_THRESHOLD_TOP: dict[str, float] = {"sawtooth_min_acf": 1.0, "_pct": 100.0, "_frac": 1.0}
# Thresholds the diagnosis divides the core count by: 0 was a ZeroDivisionError, 1e-320 an OverflowError.
# Below 1 they would call more cores "a few" than the machine has.
_THRESHOLD_BOTTOM: dict[str, float] = {"lone_cores_per_core": 1.0, "few_workers_per_core": 1.0}
# A verdict's confidence is a share: conf_hung = 7 would have the dashboard say "confidence 700%"
_CONFIDENCE_PREFIX = "conf_"
BATCH_SIZE_RANGE = (1, 10**9)  # samples per step of the whole job; more is a typo (and no job's batch)


SHOWN = 80  # characters of a value or a key from the file quoted in an error line (a 5 MB theme is no line)
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = SHOWN
_REPR.maxlist = _REPR.maxdict = 5


def _shown(value: object) -> str:
    """A value from the file as an error line quotes it: Python's repr (escapes visible), cut to ~80 chars."""
    return _REPR.repr(value)


def _cut(name: str) -> str:
    return name if len(name) <= SHOWN else name[: SHOWN - 1] + "…"


def parse_config(data: dict[str, Any], path: Path | None = None) -> Config:
    where = str(path) if path else "config"
    cfg = Config(path=path)

    def bad(key: str, allowed: str) -> UserError:
        return UserError(f"{where}: key {key} is invalid: {allowed}")

    _check_names(data, where, bad)
    _sampling(cfg, data.get("sampling", {}), bad)
    _diagnosis(cfg, data.get("diagnosis", {}), bad)
    _ui(cfg, data.get("ui", {}), bad)
    _recording(cfg, data.get("recording", {}), where, bad)
    _job(cfg, data.get("job", {}), bad)
    _inside(cfg, data.get("inside", {}), bad)
    return cfg


# how parse_config's checks word a bad key: (the key, what is allowed) -> the error naming the file
Bad = Callable[[str, str], UserError]


def _check_names(data: dict[str, Any], where: str, bad: Bad) -> None:
    """Every section and key is one the file may hold, each key inside its table."""
    for section, table in data.items():
        if section not in _SECTIONS:
            home = next((name for name, keys in _SECTIONS.items() if section in keys), None)
            if home is not None:  # a key written at the top level, outside its table
                raise UserError(f"{where}: key {section} must be inside its table: put it under [{home}]")
            raise bad(_cut(section), f"unknown section; allowed sections: {', '.join(_SECTIONS)}")
        if not isinstance(table, dict):
            raise bad(section, "must be a table like [" + section + "]")
        for key in table:
            if key not in _SECTIONS[section]:
                raise bad(f"{section}.{_cut(key)}", f"unknown key; allowed: {', '.join(sorted(_SECTIONS[section]))}")


def _sampling(cfg: Config, sampling: dict[str, Any], bad: Bad) -> None:
    for key, (lo, hi) in (("interval_s", INTERVAL_RANGE_S), ("window_s", WINDOW_RANGE_S)):
        if key in sampling:
            v = sampling[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
                raise bad(f"sampling.{key}", f"must be a number of seconds between {lo:g} and {hi:g}, got {_shown(v)}")
            setattr(cfg, key, float(v))
    if cfg.window_s < cfg.interval_s * 2:
        raise bad("sampling.window_s", "must hold at least two ticks (window_s >= 2 * interval_s)")


def _diagnosis(cfg: Config, diag: dict[str, Any], bad: Bad) -> None:
    values: dict[str, float] = {}
    for key, v in diag.items():
        # NaN passed "v < 0" and crashed the tracker later with a traceback; inf is no threshold either
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise bad(f"diagnosis.{key}", f"must be a non-negative number, got {_shown(v)}")
        top = _THRESHOLD_TOP.get(key) or next((t for suffix, t in _THRESHOLD_TOP.items() if key.endswith(suffix)), None)
        if key.startswith(_CONFIDENCE_PREFIX):
            top = 1.0
        if top is not None and v > top:
            raise bad(f"diagnosis.{key}", f"must be between 0 and {top:g}, got {_shown(v)}")
        bottom = _THRESHOLD_BOTTOM.get(key)
        if bottom is not None and v < bottom:
            raise bad(f"diagnosis.{key}", f"must be {bottom:g} or more (it divides the core count), got {_shown(v)}")
        values[key] = float(v)
    if values:
        cfg.thresholds = dataclasses.replace(Thresholds(), **values)


def _ui(cfg: Config, ui: dict[str, Any], bad: Bad) -> None:
    if "theme" in ui:
        if ui["theme"] not in THEMES:
            raise bad("ui.theme", f"must be one of {', '.join(THEMES)}, got {_shown(ui['theme'])}")
        cfg.theme = ui["theme"]
    for key in ("color_gpu", "color_sm", "color_alert"):
        if key in ui:
            v = ui[key]
            if not isinstance(v, str) or not _is_colour(v):
                raise bad(f"ui.{key}", f"must be a colour name or #rrggbb, got {_shown(v)}")
            setattr(cfg, key, v)
    if "panes" in ui:
        v = ui["panes"]
        names = ", ".join(PANES)
        if not isinstance(v, list) or not v or not all(isinstance(x, str) for x in v):
            raise bad("ui.panes", f"must be a non-empty list of pane names ({names}), got {_shown(v)}")
        unknown = [x for x in v if x not in PANES]
        if unknown:
            raise bad("ui.panes", f"{_shown(unknown[0])} is not a pane; the panes are {names}")
        if len(set(v)) != len(v):
            raise bad("ui.panes", f"names a pane twice: {_shown(v)}")
        cfg.panes = tuple(v)


def _recording(cfg: Config, rec: dict[str, Any], where: str, bad: Bad) -> None:
    if "directory" in rec:
        v = rec["directory"]
        if not isinstance(v, str) or not v or "\0" in v:  # "\u0000" made `r` fail with "embedded null byte"
            raise bad("recording.directory", f"must be a path string, got {_shown(v)}")
        cfg.recording_dir = user_path(v, f"{where}: key recording.directory")


def _job(cfg: Config, job: dict[str, Any], bad: Bad) -> None:
    if "batch_size" in job:
        v = job["batch_size"]
        lo, hi = BATCH_SIZE_RANGE
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise bad("job.batch_size", f"must be a whole number of samples per step, {lo} to {hi:,}, got {_shown(v)}")
        cfg.job_batch_size = v
    if "log_regex" in job:
        from gpu_triage.sources.joblog import compile_user_regex  # noqa: PLC0415 - only when one is set

        v = job["log_regex"]
        if not isinstance(v, str):
            raise bad("job.log_regex", f"must be a regular expression string, got {_shown(v)}")
        try:
            compile_user_regex(v)
        except (ValueError, re.error) as exc:
            raise bad("job.log_regex", str(exc)) from exc
        cfg.job_log_regex = v


def _inside(cfg: Config, inside: dict[str, Any], bad: Bad) -> None:
    if "enabled" in inside:
        if not isinstance(inside["enabled"], bool):
            raise bad("inside.enabled", f"must be true or false, got {_shown(inside['enabled'])}")
        cfg.inside_enabled = inside["enabled"]
    for key, attr in (("waiting_enter_pct", "inside_enter_pct"), ("waiting_leave_pct", "inside_leave_pct")):
        if key in inside:
            v = inside[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v <= 100:
                raise bad(f"inside.{key}", f"must be a GPU-Util percentage, 0 to 100, got {v!r}")
            setattr(cfg, attr, float(v))
    if "dumps_per_min" in inside:
        v, (lo, hi) = inside["dumps_per_min"], DUMPS_PER_MIN_RANGE
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise bad("inside.dumps_per_min", f"must be a whole number of py-spy runs a minute, {lo} to {hi}, "
                      f"got {_shown(v)}")
        cfg.inside_dumps_per_min = v
    if cfg.inside_enter_pct > cfg.inside_leave_pct:
        raise bad("inside.waiting_enter_pct", f"must not be above waiting_leave_pct ({cfg.inside_leave_pct:g}), "
                  f"got {cfg.inside_enter_pct:g}")


def stacks_wanted(config: Config, no_stacks: bool) -> bool:
    """Whether a live command reads its waiting processes' stacks: the config's switch, unless --no-stacks."""
    return config.inside_enabled and not no_stacks


def wait_band(config: Config) -> WaitBand:
    """The configured hysteresis band of "a card waits" (sources/waiting.py): the stack sampler's and the screen's."""
    return WaitBand(config.inside_enter_pct, config.inside_leave_pct)


def inside_settings(config: Config) -> InsideSettings:
    """What the stack sampler is configured with: the waiting band and its dump budget (sources/dumpbudget.py)."""
    return InsideSettings(wait_band(config), config.inside_dumps_per_min)


def _is_colour(value: str) -> bool:
    """A colour the dashboard can draw. Checked here, with Rich's own parser: a name it does not know
    ("notacolour") passed a looser check and crashed the dashboard's first frame with a traceback."""
    from rich.color import Color, ColorParseError  # noqa: PLC0415 - only when a colour is configured

    try:
        Color.parse(value)
    except ColorParseError:
        return False
    return True
