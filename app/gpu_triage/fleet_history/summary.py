"""``gpu-triage diagnose DIR --summary`` (or globs, several): the hosts and owners ranked by GPU-hours lost
(:mod:`gpu_triage.fleet_history.ranking`), then per host the share of time in each bottleneck, whose time it was and the
worst episodes, over a fleet's dataset (see :mod:`gpu_triage.storage.dataset`), in a period or all of it.

Each file gives its share as small sums (:mod:`gpu_triage.fleet_history.perfile`, in worker processes when there are
many), added up here, so memory does not grow with the dataset:

1. **Verdicts.** Where the recorder stored them (trace v3's ``verdict`` on every tick), read in columns,
   each tick standing for its own interval. Elsewhere (v1/v2 files, a writer that does not diagnose)
   recomputed by :func:`file_verdicts`: streamed in columns as ``diagnose FILE`` reads a recording
   (:func:`~gpu_triage.offline.judge.judge`), the raw engine gives a verdict every :data:`STRIDE_S` seconds of
   data on exactly the window the dashboard's :class:`~gpu_triage.window.RollingWindow` would hold at that
   tick, each standing for the ticks since the previous one (a gap in the recording ends a span: it is
   nobody's time). The summary says how many files it recomputed and how long that took. Each tick's
   GPU-seconds lost (:mod:`gpu_triage.fleet_history.lost`) count with its verdict.
2. **Utilisation**: mean GPU-Util per :data:`WINDOW_S` window while a job held the cards, from the cards'
   ``util_pct``, ``mem_used_bytes`` and ``mem_total_bytes`` alone (:func:`util_rows`). The worst episodes are
   runs of adjacent windows of one most-given bottleneck, the most GPU-hours lost first. docs/recording.md
   shows the utilisation query in DuckDB.
3. **Owners**: each verdict's seconds and GPU-seconds lost counted for the owners of the GPU processes at its
   tick; an owner across hosts is one row of the ranking.

Why a stride when recomputing: a share of time over hours does not need every tick's verdict, and the
diagnosis is ~85 % of the cost (profiled); every tick is still in the window, so each verdict sees the whole
5-minute history. What a 30 s stride loses is the exact edges of a regime, to within 30 s, and regimes
shorter than that are under-counted; stored verdicts have neither limit.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpu_triage.config import Config
from gpu_triage.diagnosis.lost import total
from gpu_triage.errors import UserError
from gpu_triage.fleet_history.onefile import STRIDE_S as STRIDE_S
from gpu_triage.fleet_history.owners import owner_shares
from gpu_triage.safetext import clean, clip
from gpu_triage.storage.dataset import is_directory, is_recording_path

log = logging.getLogger(__name__)

WINDOW_S = 300.0  # the worst episodes are made of windows this long: the dashboard's default window
MEM_HELD_FRAC = 0.10  # a job holds the cards: the diagnosis' own mem_held_frac
GLOB_CHARS = frozenset("*?[")


def is_dataset_spec(spec: str) -> bool:
    """A directory or a glob: a dataset (``diagnose FILE`` stays the one-recording command). A path that
    exists and is no directory is one recording, whatever its name holds (``run[1].parquet``)."""
    if is_directory(spec):
        return True
    if os.path.exists(os.path.expanduser(spec)):  # os.path: False, not an error, for a name too long
        return False
    return bool(GLOB_CHARS & set(spec)) or len(expand_braces(spec)) > 1


MAX_BRACES = 4096  # patterns one brace glob may become ('{a,b}{c,d}' is 4): more is a typo, not a dataset
MAX_SPEC = 4096  # characters of one path argument: PATH_MAX
MAX_GROUPS = 64  # brace groups in one path argument


def expand_braces(spec: str) -> list[str]:
    """``'host{1,2}/*.parquet'`` as the shell expands it, ``host1/*.parquet`` and ``host2/*.parquet`` (nested
    and several groups too), for a pattern quoted past the shell; braces without a comma stay as they are."""
    if "{" in spec and (len(spec) > MAX_SPEC or spec.count("{") > MAX_GROUPS):  # bounds the recursion and rescans
        raise UserError(f"{clip(spec, 80)}: a path longer than {MAX_SPEC} characters or with more than "
                        f"{MAX_GROUPS} brace groups; narrow it")
    depth, open_at, commas = 0, -1, list[int]()
    for i, ch in enumerate(spec):
        if ch == "{":
            depth += 1
            if depth == 1:
                open_at, commas = i, []
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0 and commas:
                head, tail = spec[:open_at], spec[i + 1:]
                bounds = [open_at, *commas, i]
                out: list[str] = []
                for a, b in zip(bounds, bounds[1:], strict=False):
                    out.extend(expand_braces(head + spec[a + 1:b] + tail))
                    if len(out) > MAX_BRACES:
                        raise UserError(f"{clip(spec, 80)}: the braces make more than {MAX_BRACES} patterns; "
                                        "narrow them")
                return out
        elif ch == "," and depth == 1:
            commas.append(i)
    return [spec]


FOREIGN = "not a gpu-triage recording"  # the words trace/reader.py's errors use for another program's file


def dataset_files(specs: str | Sequence[str]) -> list[Path]:
    """The finished Parquet files of one or several dataset directories or globs (brace globs expanded here:
    :func:`expand_braces`), each file once.

    Crash leftovers (``*.partial.arrows``) and temporary files are not read: ``gpu-triage recover`` them
    first (the summary says how many it saw)."""
    files: set[Path] = set()
    for spec in [specs] if isinstance(specs, str) else specs:
        for one in expand_braces(spec):
            files.update(_files_of(one))
    return sorted(files)


def in_days(path: Path, since: datetime | None, until: datetime | None) -> bool:
    """Whether a file's ``date=YYYY-MM-DD`` partition (a UTC day) can hold a tick in ``[since, until)``; a file
    outside any partition can."""
    part = next((p[5:] for p in reversed(path.parts[:-1]) if p.startswith("date=")), None)
    if part is None or (since is None and until is None):
        return True
    try:
        day = datetime.strptime(part, "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        return True
    return (since is None or day + timedelta(days=1) > since) and (until is None or day < until)


def _files_of(spec: str) -> list[Path]:
    root = Path(spec).expanduser()
    if root.is_dir():
        matches = [root]
    else:
        matches = expand_glob(root)
        if not matches:
            raise UserError(
                f"{spec}: no file or directory matches; give a dataset directory or a glob of Parquet files"
            )
    files: list[Path] = []
    for m in matches:
        if m.is_dir():
            files.extend(p for p in m.rglob("*.parquet") if is_recording_path(p, m))
        elif m.name.endswith(".parquet") and not m.name.startswith("."):
            files.append(m)
    if not files:
        unfinished = leftovers(spec)
        if unfinished:  # name them: "no recording" about a directory holding a recording is wrong
            from gpu_triage.trace.stream import unfinished_line  # noqa: PLC0415

            more = f" ({len(unfinished) - 1} more beside it)" if len(unfinished) > 1 else ""
            raise UserError(f"{spec} holds no finished recording, only unfinished ones: "
                            f"{unfinished_line(unfinished[0])}{more}")
        if root.is_dir():  # `diagnose` of a directory that is not a dataset: say what it is, as for a file
            raise UserError(
                f"{spec} is a directory with no recording in it: give a recording file, or a dataset directory "
                "(`gpu-triage record -o DIR/`)"
            )
        raise UserError(f"{spec}: no Parquet recording matches (record one with `gpu-triage record -o DIR/`)")
    return files


def none_of(n: int) -> str:
    """The words for a dataset none of whose ``n`` files could be read."""
    return "its one file cannot be read" if n == 1 else f"none of its {n} files can be read"


def leftovers(specs: str | Sequence[str]) -> list[Path]:
    out: set[Path] = set()
    for spec in [specs] if isinstance(specs, str) else specs:
        for one in expand_braces(spec):
            root = Path(one).expanduser()
            if root.is_dir():
                out.update(root.rglob("*.partial.arrows"))
            else:
                out.update(m for m in expand_glob(root) if m.name.endswith(".partial.arrows"))
    return sorted(out)


def expand_glob(pattern: Path) -> list[Path]:
    """What a glob matches, ``**`` included, without following links to directories: glob.glob follows
    them, so a dataset holding ``latest -> .`` walked itself until the path was too long, and two such
    links made that exponential (a hang). ``pathlib`` does not follow them, as ``rglob`` of a directory."""
    parts = pattern.parts
    first = next((i for i, part in enumerate(parts) if GLOB_CHARS & set(part)), len(parts))
    base = Path(*parts[:first]) if first else Path()
    if first == len(parts):
        return [base] if base.exists() else []
    try:
        return sorted(base.glob(str(Path(*parts[first:]))))
    except (OSError, ValueError):  # an unreadable base, a pattern pathlib refuses: nothing matches
        return []


def summarise(spec: str | Sequence[str], config: Config, progress: Any = None, *, use_stored: bool = True,
              workers: int | None = None, since: datetime | None = None,
              until: datetime | None = None) -> dict[str, Any]:
    """The fleet-wide ranking by GPU-hours lost (hosts, then owners across hosts), then per host: the share of
    time in each bottleneck, whose time it was, the worst episodes (see the module docstring). ``spec``: one or
    several directories or globs; ``since``/``until``: only the ticks in ``[since, until)``. ``use_stored``
    False recomputes every file's verdicts (the agreement test compares both); ``workers``: processes for the
    files (default: one per core when the work is worth starting them)."""
    import polars as pl

    from gpu_triage.fleet_history.lost import lost_sum
    from gpu_triage.fleet_history.ranking import episodes, host_ranking, owner_ranking

    specs = [spec] if isinstance(spec, str) else list(spec)
    source = ", ".join(specs)
    found = dataset_files(specs)
    files = [f for f in found if in_days(f, since, until)]
    if not files:
        raise UserError(f"{source}: none of its {len(found)} files is from {period_words(since, until)}")
    parts, skipped = _readable_parts(files, source, config, progress, use_stored, workers, since, until)
    per_bottleneck = (
        _tagged(pl, parts, "bottlenecks")
        .group_by("host", "bottleneck")
        .agg(pl.col("seconds", "gpu_s").sum(), lost_sum(pl))
    )
    shares = (
        per_bottleneck.filter(pl.col("seconds") > 0)
        .with_columns((pl.col("seconds") / pl.col("seconds").sum().over("host")).alias("share"))
        .sort(["host", "share", "bottleneck"], descending=[False, True, False])
    )
    if shares.height == 0:
        if since is not None or until is not None:
            raise UserError(f"{source}: the recordings hold no ticks from {period_words(since, until)}")
        raise UserError(f"{source}: the recordings hold no ticks")
    owners = _tagged(pl, parts, "owners")
    per_owner = owner_shares(owners)
    util = (
        _tagged(pl, parts, "util")
        .group_by("host", "ts")
        .agg((pl.col("util_sum").sum() / pl.col("ticks").sum()).alias("util_pct"), pl.col("ticks").sum())
    )
    worst = episodes(pl, _tagged(pl, parts, "modes"), util)
    hosts_files: dict[str, int] = {}
    for part in parts:
        hosts_files[part.host] = hosts_files.get(part.host, 0) + 1
    recomputed = [p for p in parts if not p.stored]
    ranking = host_ranking(pl, per_bottleneck)
    out: dict[str, Any] = {
        "source": source,
        "period": {"since": _iso(since), "until": _iso(until)},  # null: open
        "files": len(parts),
        "skipped": skipped,  # [{path, reason}]: unreadable files left out (also warned on stderr)
        "leftovers": [str(p) for p in leftovers(specs)],
        # files whose verdicts were recomputed (no stored verdict on every tick), and the seconds that took
        "recomputed_files": len(recomputed),
        "recompute_s": round(sum(p.seconds for p in recomputed), 1),
        # GPU-hours recorded and lost in the period (docs/diagnosis.md, "GPU-hours lost")
        "gpu_hours": round(sum(r["gpu_hours"] for r in ranking), 4),
        # null: no figure (a tick none of whose covered cards reads GPU-Util, and nothing known lost: "n/a")
        "gpu_hours_lost": _hours(total(r["gpu_hours_lost"] for r in ranking)),
        # what to fix first: every host, then every owner across hosts, most GPU-hours lost first
        "ranking": {"hosts": ranking, "owners": owner_ranking(pl, owners)},
        "hosts": {},
    }
    for entry in ranking:
        out["hosts"][entry["host"]] = _host_entry(pl, entry, shares, hosts_files.get(entry["host"], 0),
                                                  per_owner, worst)
    return out


def _readable_parts(files: list[Path], source: str, config: Config, progress: Any, use_stored: bool,
                    workers: int | None, since: datetime | None, until: datetime | None,
                    ) -> tuple[list[Any], list[dict[str, str]]]:
    """The files' parts, and the files left out with why: one damaged or foreign file does not sink a fleet's
    summary, but a source none of whose files can be read is one clear error (UserError) rather than an empty
    summary."""
    from gpu_triage.fleet_history.perfile import FilePart, all_parts

    skipped: list[dict[str, str]] = []
    foreign: list[Path] = []
    parts: list[FilePart] = []
    for f, part in zip(files, all_parts(files, config, progress, use_stored, workers, (since, until)), strict=True):
        if not isinstance(part, FilePart):
            skipped.append({"path": clean(str(f)), "reason": clean(part.reason)})
            if FOREIGN in part.reason:
                # another program's Parquet (`diagnose /tmp`): counted in one line below, not one line each
                foreign.append(f)
                log.debug("%s left out of the summary: %s", f, part.reason)
            else:
                log.warning("%s left out of the summary: %s", f, part.reason)
            continue
        for line in part.warnings:
            log.warning("%s", line)
        parts.append(part)
    if foreign and parts:
        log.warning("%d Parquet file%s under %s %s not gpu-triage recordings, left out (first: %s)", len(foreign),
                    "" if len(foreign) == 1 else "s", source, "is" if len(foreign) == 1 else "are", foreign[0])
    if not parts:
        if len(foreign) == len(files) and len(files) > 1:
            raise UserError(f"{source}: none of its {len(files)} Parquet files is a gpu-triage recording (first: "
                            f"{foreign[0]}); give a recording or a dataset directory (`gpu-triage record -o DIR/`)")
        raise UserError(f"{source}: {none_of(len(files))} ({skipped[0]['path']}: "
                        f"{skipped[0]['reason']})")
    return parts, skipped


def _host_entry(pl: Any, entry: dict[str, Any], shares: Any, files: int, per_owner: dict[str, Any],
                worst: Any) -> dict[str, Any]:
    """One host's part of the summary, from its row of the ranking and its rows of the fleet's frames."""
    from gpu_triage.fleet_history.ranking import episode_rows

    host = entry["host"]
    mine = shares.filter(pl.col("host") == host)
    return {
        "seconds": float(mine["seconds"].sum()),
        "files": files,
        "gpu_hours": entry["gpu_hours"],
        "gpu_hours_lost": entry["gpu_hours_lost"],
        "bottlenecks": {r["bottleneck"]: round(r["share"], 4) for r in mine.iter_rows(named=True)},
        # each bottleneck that lost time, most first; null: one judged where no covered card reads GPU-Util
        "lost_by_bottleneck": {r["bottleneck"]: None if r["lost_s"] is None else round(r["lost_s"] / 3600, 4)
                               for r in mine.sort("lost_s", descending=True, nulls_last=True).iter_rows(named=True)
                               if r["lost_s"] is None or r["lost_s"] > 0},
        # whose time it was: per owner of the GPU processes, its seconds and the share of them in each
        # bottleneck (empty for recordings without owners)
        "owners": per_owner.get(host, {}),
        # the worst episodes: adjacent 5-minute windows of one bottleneck merged, most GPU-hours lost first
        "worst_windows": episode_rows(pl, worst, host),
    }


def _hours(h: float | None) -> float | None:
    return None if h is None else round(h, 4)


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def period_words(since: datetime | None, until: datetime | None) -> str:
    """``2026-01-05 00:00 UTC to 2026-01-12 00:00 UTC``, ``since …``, ``before …``, or ``any time``."""
    def at(when: datetime) -> str:
        return f"{when.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    if since is not None and until is not None:
        return f"{at(since)} to {at(until)}"
    if since is not None:
        return f"since {at(since)}"
    return f"before {at(until)}" if until is not None else "any time"


_EMPTY = {
    "bottlenecks": {"bottleneck": "str", "seconds": "f64", "lost_s": "f64", "gpu_s": "f64"},
    "modes": {"ts": "ts", "bottleneck": "str", "seconds": "f64", "lost_s": "f64"},
    "owners": {"owner": "str", "bottleneck": "str", "seconds": "f64", "lost_s": "f64"},
    "util": {"ts": "ts", "util_sum": "f64", "ticks": "u32"},
}


def _tagged(pl: Any, parts: list[Any], attr: str) -> Any:
    """The files' frames of one kind, each with its host, as one frame; a bottleneck read from a file (anyone
    may hand one over) cleaned of what a terminal would obey, as the reader cleans every name."""
    types = {"str": pl.String, "f64": pl.Float64, "u32": pl.UInt32, "ts": pl.Datetime("us", "UTC")}
    schema = {"host": pl.String} | {k: types[v] for k, v in _EMPTY[attr].items()}
    frames = [getattr(p, attr).with_columns(pl.lit(p.host, dtype=pl.String).alias("host"))
              for p in parts if getattr(p, attr) is not None]
    frame = (pl.concat([f.select(list(schema)).cast(schema) for f in frames], how="vertical")
             if frames else pl.DataFrame(schema=schema))
    if "bottleneck" in frame.columns:
        words = frame["bottleneck"].unique().drop_nulls().to_list()
        changed = {w: clean(w) for w in words if clean(w) != w}
        if changed:
            frame = frame.with_columns(pl.col("bottleneck").replace(changed))
    return frame
