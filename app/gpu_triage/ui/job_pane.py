"""The job pane: the training's own pulse under the cards (pure text, like the other panes).

Line 1: title, the source (pulse, or the log format), and "no progress for N s" when the job stopped.
Line 2: samples/s over the window as a waveform on the same time axis as the cards' GPU-Util lines (same
left edge, same width, same binning), scaled to the window's highest rate, then the latest samples/s, step
time and data-wait share. Then one line per rank: its card (from the process list: the card its pid runs
on), samples/s, step time, data wait. Without a job source: one "n/a" line saying how to get one.
"""

from __future__ import annotations

import math

import numpy as np
from rich.text import Text

from gpu_triage.model import JobSample
from gpu_triage.ui import formatters, panes
from gpu_triage.ui.glyphs import waveform
from gpu_triage.ui.gpu_pane import card_wave_span
from gpu_triage.window import WindowView

NA_TEXT = "JOB  n/a: no job source (--job-log PATH, or `from gpu_triage import pulse` in the training)"
NA_TEXTS = (NA_TEXT, "JOB  n/a: no job source (--job-log PATH, or gpu_triage.pulse in the job)",
            "JOB  n/a: no job source")
NO_PROGRESS_AFTER_S = 10.0  # say "no progress" from here on (the rate already reads 0 once a step is overdue)
WAIT_ALERT_PCT = 50.0


def job_lines(view: WindowView, notice: str | None = None, max_ranks: int = 8) -> int:
    """Lines the pane wants: title + waveform + one per rank (at most ``max_ranks``), and the notice; 1 with no
    job data."""
    last = _last_job(view)
    if last is None:
        return 1
    return 2 + min(len(last.ranks), max_ranks) + (1 if notice else 0)


def _last_job(view: WindowView) -> JobSample | None:
    for job in reversed(view.jobs):
        if job is not None:
            return job
    return None


def _num(v: float | None, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if abs(v) >= 100:
        return f"{v:,.0f}{unit}"
    if abs(v) >= 10:
        return f"{v:.1f}{unit}"
    return f"{v:.2f}{unit}"


def _secs(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


def job_pane(view: WindowView, width: int, lines: int, colours: panes.Colours, *,
             source_configured: bool = True, notice: str | None = None) -> Text:
    """The pane (see the module docstring). ``notice``: what the job source says now (a log that vanished,
    nothing recognised in it), shown on the last line, or in place of the n/a line when there is no data."""
    out = Text(no_wrap=True, end="")
    last = _last_job(view)
    if last is None:
        if notice:
            out.append(f"JOB  n/a: {notice}"[:width], f"bold {colours.alert}")
        elif source_configured:
            out.append(formatters.longest_fitting(NA_TEXTS, width), "grey50")
        return out
    show_notice = bool(notice) and lines >= 2  # the notice takes the last line
    _body(out, view, last, width, lines - (1 if show_notice else 0), colours)
    if show_notice:
        out.append("\n")
        out.append(f"  {notice}"[:width], f"bold {colours.alert}")
    return out


def _body(out: Text, view: WindowView, last: JobSample, width: int, lines: int, colours: panes.Colours) -> None:
    """Title, the samples/s line and the ranks, in ``lines`` lines."""
    stopped = last.since_progress_s is not None and last.since_progress_s >= NO_PROGRESS_AFTER_S
    _title(out, last, width, colours, stopped)
    if lines < 2:
        return
    out.append("\n")
    _rate_line(out, view, last, width, colours, stopped)
    _rank_lines(out, view, last, width, lines, colours)


def _title(out: Text, last: JobSample, width: int, colours: panes.Colours, stopped: bool) -> None:
    title = f"JOB  samples/s (scaled to the window's peak, same time axis as the cards)  source: {last.source}"
    if last.ranks:
        title += f" · {len(last.ranks)} rank{'s' if len(last.ranks) != 1 else ''}"
    if stopped:
        # a state, not a remark at the end of the title: first on the line, reversed, before any wording
        badge = f" NO PROGRESS for {last.since_progress_s:.0f} s "
        out.append("JOB "[:width], "bold")
        out.append(badge[: max(0, width - 4)], f"bold reverse {colours.alert}")
        out.append(title.removeprefix("JOB ")[: max(0, width - 4 - len(badge))], "bold")
    else:
        out.append(title[:width], "bold")


def _rate_line(out: Text, view: WindowView, last: JobSample, width: int, colours: panes.Colours,
               stopped: bool) -> None:
    """The samples/s waveform on the cards' time axis, the latest rate, step time and data wait."""
    left, wave_w = card_wave_span(width)  # the cards' time axis
    sps = np.array([np.nan if j is None or j.samples_per_s is None else j.samples_per_s for j in view.jobs],
                   dtype=float)
    if np.isnan(sps).all():  # a log that counts steps without --batch-size: steps/s is what there is
        sps = np.array([np.nan if j is None or j.steps_per_s is None else j.steps_per_s for j in view.jobs],
                       dtype=float)
        unit = " steps/s"
        now = last.steps_per_s
    else:
        unit = "/s"
        now = last.samples_per_s
    peak = float(np.nanmax(sps)) if not np.isnan(sps).all() else math.nan
    scaled = (sps * (100.0 / peak) if peak and not math.isnan(peak) and peak > 0
              else np.where(np.isnan(sps), np.nan, 0.0))
    out.append(" /s ".ljust(left)[:left], "bold")
    # stepped as the cards are (gpu_pane.gpu_pane): the same tick in the same column
    out.append_text(waveform(scaled, wave_w, colours.gpu, newest=view.ticks_ever - 1 if view.ticks_ever else None))
    # stalled, the last step time is stale (the step that never ends has no time yet): not shown beside 0/s
    tail = f" {_num(now, unit)}" + (" stalled" if stopped else f" step {_secs(last.step_time_s)}")
    wait = last.data_wait_pct
    out.append(tail[: max(0, width - left - wave_w)], f"bold {colours.alert}" if stopped else "")
    if wait is not None:
        wtext = f" wait {wait:.0f}%"
        room = max(0, width - left - wave_w - len(tail))
        out.append(wtext[:room], f"bold {colours.alert}" if wait > WAIT_ALERT_PCT else "")


def _rank_lines(out: Text, view: WindowView, last: JobSample, width: int, lines: int,
                colours: panes.Colours) -> None:
    """One line per rank that fits: its card, rate, step time, data wait, and whether it stopped."""
    card_of = {p.pid: p.gpu_index for p in (view.procs[-1] if view.procs else [])}
    for r in last.ranks[: max(0, lines - 2)]:
        out.append("\n")
        card = card_of.get(r.pid) if r.pid is not None else None
        where = f"gpu{card}" if card is not None else (f"local{r.local_rank}" if r.local_rank is not None else "")
        rank_stopped = r.since_progress_s is not None and r.since_progress_s >= NO_PROGRESS_AFTER_S
        step = "stalled" if rank_stopped else _secs(r.step_time_s)
        line = f"  rank {r.rank} {where:<7} {_num(r.samples_per_s, '/s'):>9}  step {step:>8}  "
        out.append(line[:width])
        if r.data_wait_pct is not None:
            wtext = f"data wait {r.data_wait_pct:3.0f}%"
            out.append(wtext[: max(0, width - len(line))],
                       f"bold {colours.alert}" if r.data_wait_pct > WAIT_ALERT_PCT else "")
        else:
            out.append("data wait n/a"[: max(0, width - len(line))], "grey50")
        if rank_stopped and r.since_progress_s is not None:
            extra = f"  no progress for {r.since_progress_s:.0f} s"
            used = len(line) + 15
            out.append(extra[: max(0, width - used)], f"bold {colours.alert}")
