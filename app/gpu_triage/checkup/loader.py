"""``gpu-triage loader MODULE:FACTORY``: the input pipeline measured alone, one setting at a time.

"Measure the DataLoader alone first": if the loader cannot feed the cards with no model in the way, no
tuning of the training step will. For each setting (``num_workers`` x ``pin_memory`` x ``prefetch_factor``)
the user's factory is called again, its loader iterated for a bounded number of batches with no model, and
three things are measured:

- throughput: samples/s (batches/s where a batch's length cannot be read), timed from the first batch
  (worker start-up is reported apart as ``first_batch_s``: it is paid once per epoch without
  ``persistent_workers``);
- CPU use of the process tree (this process and its DataLoader workers, from psutil's CPU times), in % of
  one core;
- peak memory: the sum of the tree's RSS, sampled every 0.1 s (pages shared after fork are counted once
  per process, so it is an upper bound).

The iteration runs in a thread; the main thread watches it: no batch for ``--timeout`` seconds is a hang
(one line, exit 2, the workers ended), Ctrl-C stops it and reports what was measured. The recommendation
(:func:`recommend`) is the smallest ``num_workers`` within 5 % of the best rate: more workers than that cost
CPU and memory for nothing.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_triage.errors import UserError
from gpu_triage.units import fmt_bytes

log = logging.getLogger(__name__)

WITHIN = 0.05  # the recommendation: the smallest num_workers within 5 % of the best
MEMORY_EVERY_S = 0.1
PROGRESS_EVERY_S = 0.25
SETTING_KWARGS = ("num_workers", "pin_memory", "prefetch_factor")


@dataclass(frozen=True)
class Setting:
    num_workers: int
    pin_memory: bool
    prefetch_factor: int | None  # None with num_workers=0 (torch refuses a prefetch factor without workers)

    def label(self) -> str:
        pf = "-" if self.prefetch_factor is None else str(self.prefetch_factor)
        return f"workers={self.num_workers} pin={'on' if self.pin_memory else 'off'} prefetch={pf}"


def settings_for(workers: Sequence[int], pin: Sequence[bool], prefetch: Sequence[int]) -> list[Setting]:
    """Every combination, in the order given, without duplicates (prefetch means nothing with 0 workers)."""
    out: list[Setting] = []
    for w in workers:
        for p in pin:
            for pf in [None] if w == 0 else prefetch:
                s = Setting(w, p, pf)
                if s not in out:
                    out.append(s)
    return out


def recommend(results: Sequence[Mapping[str, Any]], within: float = WITHIN) -> dict[str, Any] | None:
    """The smallest num_workers whose rate is within ``within`` of the best; None if nothing was measured.

    The rate is samples/s where every setting has it, else batches/s. Ties on num_workers go to the
    smaller prefetch factor, then to pin_memory off: the cheaper setting.
    """
    key = "samples_per_s" if results and all(r.get("samples_per_s") for r in results) else "batches_per_s"
    rated = [r for r in results if r.get(key)]
    if not rated:
        return None
    best = max(float(r[key]) for r in rated)
    good = [r for r in rated if float(r[key]) >= (1.0 - within) * best]
    pick = min(good, key=lambda r: (r["num_workers"], r["prefetch_factor"] or 0, bool(r["pin_memory"])))
    fastest = max(rated, key=lambda r: float(r[key]))
    return {
        "num_workers": pick["num_workers"],
        "pin_memory": pick["pin_memory"],
        "prefetch_factor": pick["prefetch_factor"],
        "rate_key": key,
        "rate": float(pick[key]),
        "best_rate": best,
        "best_num_workers": fastest["num_workers"],
        "within": within,
    }


def batch_len(batch: Any) -> int | None:
    """Samples in a batch: the first dimension of a tensor (or array), of the first field of a tuple / list /
    dict batch; None when it cannot be read."""
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    if isinstance(batch, list | tuple) and batch:
        return batch_len(batch[0])
    if isinstance(batch, Mapping) and batch:
        return batch_len(next(iter(batch.values())))
    return None


def load_factory(spec: str, cwd: Path | None = None) -> Callable[..., Any]:
    """``MODULE:FACTORY`` (importable from ``cwd``) or ``path/to/file.py:FACTORY``; UserError otherwise."""
    module_name, sep, attr = spec.rpartition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"{spec!r}: give MODULE:FACTORY, e.g. mytrain.data:make_loader or ./data.py:make_dataset")
    base = Path.cwd() if cwd is None else cwd
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            path = (base / module_name).resolve()
            if not path.is_file():
                raise UserError(f"{spec!r}: no file {path}")
            name = path.stem
            mod_spec = importlib.util.spec_from_file_location(name, path)
            if mod_spec is None or mod_spec.loader is None:
                raise UserError(f"{spec!r}: {path} cannot be imported as a Python module")
            module = importlib.util.module_from_spec(mod_spec)
            sys.modules[name] = module  # DataLoader workers started by spawn find it by name
            sys.path.insert(0, str(path.parent))
            mod_spec.loader.exec_module(module)
        else:
            if str(base) not in sys.path:
                sys.path.insert(0, str(base))
            module = importlib.import_module(module_name)
    except UserError:
        raise
    except ModuleNotFoundError as exc:
        raise UserError(f"{spec!r}: cannot import {module_name} from {base} ({exc})") from exc
    except BaseException as exc:  # the user's module raised while importing (SystemExit included)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise UserError(f"{spec!r}: importing {module_name} raised {type(exc).__name__}: {exc}") from exc
    factory = getattr(module, attr, None)
    if factory is None:
        raise UserError(f"{spec!r}: {module_name} has no {attr}")
    if not callable(factory):
        raise UserError(f"{spec!r}: {attr} is a {type(factory).__name__}, not a function")
    return factory


class FactorySource:
    """What the factory gives, per setting: a DataLoader it builds, or a Dataset we wrap."""

    def __init__(self, torch: Any, factory: Callable[..., Any], spec: str, batch_size: int, n_settings: int) -> None:
        self.torch = torch
        self.factory = factory
        self.spec = spec
        self.batch_size = batch_size
        self.n_settings = n_settings
        self._dataset: Any = None
        try:
            params = inspect.signature(factory).parameters
        except (TypeError, ValueError):
            params = {}  # type: ignore[assignment]
        self.any_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        self.accepted = [k for k in SETTING_KWARGS if self.any_kwargs or k in params]
        self.kind = "unknown"

    def _call(self, setting: Setting) -> Any:
        values = {
            "num_workers": setting.num_workers,
            "pin_memory": setting.pin_memory,
            "prefetch_factor": setting.prefetch_factor,
        }
        if self._dataset is not None:
            return self._dataset
        try:
            return self.factory(**{k: values[k] for k in self.accepted})
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            raise UserError(f"{self.spec} raised {type(exc).__name__}: {exc} ({setting.label()})") from exc

    def loader_for(self, setting: Setting) -> Any:
        data = self.torch.utils.data
        obj = self._call(setting)
        if isinstance(obj, data.DataLoader) or (not _is_dataset(data, obj) and hasattr(obj, "__iter__")):
            if "num_workers" not in self.accepted and self.n_settings > 1:
                raise UserError(
                    f"{self.spec} returned a loader but takes no num_workers= argument, so the settings cannot be "
                    "varied: accept num_workers=, pin_memory=, prefetch_factor=, or return a Dataset"
                )
            self.kind = "loader"
            return obj
        if _is_dataset(data, obj):
            self.kind = "dataset"
            if not self.accepted:
                self._dataset = obj  # built once, wrapped per setting
            kwargs: dict[str, Any] = {"batch_size": self.batch_size, "num_workers": setting.num_workers}
            kwargs["pin_memory"] = setting.pin_memory
            if setting.num_workers > 0:
                kwargs["prefetch_factor"] = setting.prefetch_factor
            return data.DataLoader(obj, **kwargs)
        raise UserError(
            f"{self.spec} returned {type(obj).__name__}, which is not iterable: return a DataLoader (or anything "
            "iterable over batches) or a Dataset"
        )


def _is_dataset(data: Any, obj: Any) -> bool:
    if isinstance(obj, data.DataLoader):
        return False
    if isinstance(obj, data.Dataset | data.IterableDataset):
        return True
    return hasattr(obj, "__getitem__") and hasattr(obj, "__len__") and not hasattr(obj, "__iter__")


class WorkerTree:
    """CPU seconds and RSS of this process and its descendants (the DataLoader workers)."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self.me = psutil.Process()

    def procs(self) -> list[Any]:
        try:
            return [self.me, *self.me.children(recursive=True)]
        except self._psutil.Error:
            return [self.me]

    def cpu(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for p in self.procs():
            try:
                t = p.cpu_times()
                out[p.pid] = float(t.user + t.system)
            except self._psutil.Error:
                continue
        return out

    def rss(self) -> int:
        total = 0
        for p in self.procs():
            try:
                total += int(p.memory_info().rss)
            except self._psutil.Error:
                continue
        return total

    def end_children(self, grace_s: float = 3.0) -> None:
        try:
            kids = self.me.children(recursive=True)
        except self._psutil.Error:
            return
        for k in kids:
            try:
                k.terminate()
            except self._psutil.Error:
                continue
        _gone, alive = self._psutil.wait_procs(kids, timeout=grace_s)
        for k in alive:
            try:
                k.kill()
            except self._psutil.Error:
                continue


class SettingRun:
    """One setting's iteration, in a thread the main thread watches (progress, hang, Ctrl-C)."""

    def __init__(self, source: FactorySource, setting: Setting, batches: int, tree: WorkerTree) -> None:
        self.source = source
        self.setting = setting
        self.batches = batches
        self.tree = tree
        self.stop = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.started = time.monotonic()
        self.last_batch = self.started
        self.n = 0
        self.samples: int | None = 0
        self.first_batch_s: float | None = None
        self.t0: float | None = None
        self.t1: float | None = None
        self.cpu0: dict[int, float] = {}
        self.cpu1: dict[int, float] = {}
        self.peak_rss = 0
        self.epoch_ended = False
        self.thread = threading.Thread(target=self._body, name="gpu-triage-loader", daemon=True)
        self.mem_thread = threading.Thread(target=self._memory, name="gpu-triage-loader-mem", daemon=True)

    def start(self) -> None:
        self.thread.start()
        self.mem_thread.start()

    def _memory(self) -> None:
        while not self.done.is_set():
            self.peak_rss = max(self.peak_rss, self.tree.rss())
            self.done.wait(MEMORY_EVERY_S)

    def _body(self) -> None:
        it: Iterator[Any] | None = None
        try:
            loader = self.source.loader_for(self.setting)
            try:
                it = iter(loader)
            except TypeError as exc:
                raise UserError(f"{self.source.spec} returned something that is not iterable ({exc})") from exc
            next(it)  # the first batch: workers started, pipeline filled
            self.last_batch = time.monotonic()
            self.first_batch_s = self.last_batch - self.started
            self.cpu0 = self.tree.cpu()
            self.t0 = time.perf_counter()
            while self.n < self.batches and not self.stop.is_set():
                try:
                    batch = next(it)
                except StopIteration:
                    self.epoch_ended = True
                    break
                self.n += 1
                k = batch_len(batch)
                self.samples = None if k is None or self.samples is None else self.samples + k
                self.last_batch = time.monotonic()
            self.t1 = time.perf_counter()
            self.cpu1 = self.tree.cpu()  # before the workers are shut down
        except StopIteration:
            self.error = UserError(f"{self.source.spec} gave no batch at all ({self.setting.label()})")
        except BaseException as exc:  # handed to the main thread, which turns it into one line
            self.error = exc
        finally:
            del it  # shuts the DataLoader's workers down
            self.peak_rss = max(self.peak_rss, self.tree.rss())
            self.done.set()

    def result(self) -> dict[str, Any]:
        wall = (self.t1 - self.t0) if self.t0 is not None and self.t1 is not None else None
        cpu_s = sum(max(0.0, v - self.cpu0.get(pid, 0.0)) for pid, v in self.cpu1.items()) if self.cpu1 else None
        timed = self.n > 0 and wall is not None and wall > 0
        return {
            "num_workers": self.setting.num_workers,
            "pin_memory": self.setting.pin_memory,
            "prefetch_factor": self.setting.prefetch_factor,
            "batches": self.n,
            "samples": self.samples if self.n else None,
            "seconds": wall,
            "first_batch_s": self.first_batch_s,
            "samples_per_s": (self.samples / wall) if timed and self.samples else None,  # type: ignore[operator]
            "batches_per_s": (self.n / wall) if timed else None,  # type: ignore[operator]
            "cpu_percent": (100.0 * cpu_s / wall) if timed and cpu_s is not None else None,  # type: ignore[operator]
            "peak_rss_bytes": self.peak_rss or None,
            "epoch_ended": self.epoch_ended,
        }


def measure(
    source: FactorySource,
    setting: Setting,
    batches: int,
    timeout_s: float,
    tree: WorkerTree,
    progress: Callable[[SettingRun], None] | None = None,
) -> tuple[dict[str, Any], bool]:
    """One setting; returns its result and whether Ctrl-C stopped it. UserError on a hang or a failure."""
    run = SettingRun(source, setting, batches, tree)
    run.start()
    interrupted = False
    try:
        while not run.done.wait(PROGRESS_EVERY_S):
            if progress is not None:
                progress(run)
            if time.monotonic() - run.last_batch > timeout_s:
                run.stop.set()
                tree.end_children()
                what = "its first batch" if run.first_batch_s is None else f"batch {run.n + 2}"
                raise UserError(
                    f"{source.spec} hangs: no batch for {timeout_s:g} s ({setting.label()}, waiting for {what}); "
                    "check the Dataset's __getitem__, or raise --timeout"
                )
    except KeyboardInterrupt:
        interrupted = True
        run.stop.set()
        if not run.done.wait(5.0):
            tree.end_children()
            run.done.wait(5.0)
    if run.error is not None:
        if isinstance(run.error, UserError):
            raise run.error
        if interrupted and isinstance(run.error, KeyboardInterrupt | RuntimeError):
            return run.result(), True  # a worker saw the Ctrl-C too
        raise UserError(
            f"{source.spec}: iterating failed with {type(run.error).__name__}: {run.error} ({setting.label()})"
        ) from run.error
    return run.result(), interrupted


def render_table(results: Sequence[Mapping[str, Any]], rec: Mapping[str, Any] | None, cores: int) -> str:
    head = (
        f"{'workers':>7} {'pin':>4} {'prefetch':>8} {'samples/s':>10} {'batches/s':>9} {'CPU %':>7} "
        f"{'peak mem':>10} {'1st batch':>9}"
    )
    lines = [head]
    for r in results:

        def num(v: Any, fmt: str) -> str:
            return "n/a" if v is None else format(v, fmt)

        lines.append(
            f"{r['num_workers']:>7} {'on' if r['pin_memory'] else 'off':>4} "
            f"{'-' if r['prefetch_factor'] is None else r['prefetch_factor']:>8} "
            f"{num(r['samples_per_s'], ',.0f'):>10} {num(r['batches_per_s'], ',.1f'):>9} "
            f"{num(r['cpu_percent'], '.0f'):>7} "
            f"{'n/a' if not r['peak_rss_bytes'] else fmt_bytes(r['peak_rss_bytes']):>10} "
            f"{num(r['first_batch_s'], '.2f') + ' s' if r['first_batch_s'] is not None else 'n/a':>9}"
        )
    lines.append(
        f"(CPU % is of one core; this machine has {cores}. Peak memory sums the RSS of the process and its workers.)"
    )
    if rec is None:
        lines.append("recommendation: n/a (no setting gave a timed batch)")
    else:
        unit = "samples/s" if rec["rate_key"] == "samples_per_s" else "batches/s"
        pf = rec["prefetch_factor"]
        lines.append(
            f"recommendation: num_workers={rec['num_workers']}"
            + (f", prefetch_factor={pf}" if pf is not None else "")
            + f", pin_memory={rec['pin_memory']}: {rec['rate']:,.0f} {unit}, within {rec['within']:.0%} of the best "
            f"({rec['best_rate']:,.0f} with num_workers={rec['best_num_workers']})"
        )
    return "\n".join(lines)
