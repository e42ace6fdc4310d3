"""`gpu-triage loader MODULE:FACTORY`: the recommendation follows the measured numbers, the results have
their shape on a real (tiny) run, and a factory that raises, hangs or gives something not iterable is one
line and exit 2 with no worker left behind."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from gpu_triage.checkup.loader import batch_len, load_factory, recommend, settings_for
from gpu_triage.cli import main
from gpu_triage.errors import UserError
from torch_needed import need_torch


def row(workers: int, sps: float | None, *, bps: float | None = None, pin: bool = False, pf: int | None = 2) -> dict:
    return {
        "num_workers": workers,
        "pin_memory": pin,
        "prefetch_factor": None if workers == 0 else pf,
        "samples_per_s": sps,
        "batches_per_s": bps if bps is not None else (None if sps is None else sps / 32),
    }


def test_recommendation_is_the_smallest_worker_count_within_five_percent_of_the_best() -> None:
    results = [row(0, 100.0), row(2, 380.0), row(4, 400.0), row(8, 402.0), row(16, 390.0)]
    rec = recommend(results)
    assert rec is not None
    # 380 is under 95 % of 402 (381.9); 400 is within: 4 workers, not the fastest 8
    assert (rec["num_workers"], rec["rate"], rec["best_rate"], rec["best_num_workers"]) == (4, 400.0, 402.0, 8)


def test_recommendation_moves_with_the_numbers() -> None:
    assert recommend([row(0, 100.0), row(2, 382.0), row(8, 402.0)])["num_workers"] == 2  # type: ignore[index]
    assert recommend([row(0, 500.0), row(2, 480.0), row(8, 470.0)])["num_workers"] == 0  # type: ignore[index]
    assert recommend([row(0, 10.0), row(2, 20.0), row(8, 100.0)])["num_workers"] == 8  # type: ignore[index]


def test_recommendation_prefers_the_cheaper_setting_on_equal_workers_and_falls_back_to_batches() -> None:
    rec = recommend([row(4, 400.0, pf=8, pin=True), row(4, 399.0, pf=2)])
    assert rec is not None and (rec["prefetch_factor"], rec["pin_memory"]) == (2, False)
    rec = recommend([row(0, None, bps=10.0), row(2, None, bps=30.0)])  # batches whose length cannot be read
    assert rec is not None and (rec["num_workers"], rec["rate_key"]) == (2, "batches_per_s")
    assert recommend([]) is None
    assert recommend([row(0, None, bps=None)]) is None


def test_settings_skip_prefetch_without_workers() -> None:
    got = [(s.num_workers, s.pin_memory, s.prefetch_factor) for s in settings_for([0, 2], [False, True], [2, 4])]
    assert got == [(0, False, None), (0, True, None), (2, False, 2), (2, False, 4), (2, True, 2), (2, True, 4)]


def test_batch_len_reads_the_first_dimension_of_common_batch_shapes() -> None:
    class Arr:
        def __init__(self, *shape: int) -> None:
            self.shape = shape

    assert batch_len(Arr(7, 3)) == 7
    assert batch_len((Arr(5, 2), Arr(5))) == 5
    assert batch_len({"image": Arr(4, 3), "label": Arr(4)}) == 4
    assert batch_len(Arr()) is None and batch_len("text") is None and batch_len([]) is None


@pytest.mark.parametrize(
    ("spec", "source", "says"),
    [
        ("nocolon", "", "give MODULE:FACTORY"),
        ("missing_mod_xyz:f", "", "cannot import missing_mod_xyz"),
        ("./absent.py:f", "", "no file"),
        ("./mod_a.py:nothing", "x = 1\n", "has no nothing"),
        ("./mod_b.py:x", "x = 1\n", "not a function"),
        ("./mod_c.py:f", "raise SystemExit('refusing to import')\n", "raised SystemExit: refusing to import"),
    ],
)
def test_bad_factories_are_one_clear_error(tmp_path: Path, spec: str, source: str, says: str) -> None:
    if source:
        (tmp_path / spec[2:].split(":")[0]).write_text(source)
    with pytest.raises(UserError, match=says):
        load_factory(spec, cwd=tmp_path)


DATA = """
import time
import torch
from torch.utils.data import DataLoader, Dataset


class Tiny(Dataset):
    def __len__(self):
        return 400

    def __getitem__(self, i):
        return torch.full((3, 4, 4), float(i)), i % 10


def dataset():
    return Tiny()


def loader(num_workers, pin_memory, prefetch_factor):
    return DataLoader(Tiny(), batch_size=8, num_workers=num_workers, pin_memory=pin_memory,
                      prefetch_factor=prefetch_factor)


class Hang(Tiny):
    def __getitem__(self, i):
        time.sleep(3600)


def hang():
    return Hang()


def boom(**settings):
    raise RuntimeError("the bucket is gone")


def number():
    return 42
"""


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    need_torch()
    (tmp_path / "tinydata.py").write_text(textwrap.dedent(DATA))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["loader", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_dataset_is_measured_per_setting_and_the_recommendation_follows_the_numbers(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_json(capsys, "./tinydata.py:dataset", "--workers", "0,2", "--batches", "6", "--batch-size", "4")
    assert out["kind"] == "dataset" and out["interrupted"] is False
    assert [(r["num_workers"], r["prefetch_factor"]) for r in out["results"]] == [(0, None), (2, 2)]
    for r in out["results"]:
        assert r["batches"] == 6 and r["samples"] == 24  # our DataLoader, --batch-size 4
        assert r["samples_per_s"] > 0 and r["batches_per_s"] > 0 and r["first_batch_s"] >= 0
        assert r["cpu_percent"] is not None and r["peak_rss_bytes"] > 0
    assert out["recommendation"] == recommend(out["results"])


def test_a_factory_taking_the_settings_gives_its_own_loader(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "tinydata:loader", "--workers", "0,1", "--batches", "3")
    assert out["kind"] == "loader"
    assert [r["samples"] for r in out["results"]] == [24, 24]  # the factory's own batch_size 8


def test_a_short_loader_ends_the_setting_early(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "tinydata:dataset", "--workers", "0", "--batch-size", "100", "--batches", "50")
    (r,) = out["results"]
    assert r["epoch_ended"] is True and r["batches"] == 3  # 400 samples: the first batch, then 3 timed


def test_the_table_ends_with_the_recommendation(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["loader", "tinydata:dataset", "--workers", "0", "--batches", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[:4] == ["workers", "pin", "prefetch", "samples/s"]
    assert lines[-1].startswith("recommendation: num_workers=0")


@pytest.mark.parametrize(
    ("factory", "extra", "says"),
    [
        ("boom", [], "tinydata:boom raised RuntimeError: the bucket is gone"),
        ("number", [], "returned int, which is not iterable"),
        ("hang", ["--workers", "0", "--timeout", "1"], "hangs: no batch for 1 s"),
        # the two workers start in ~0.1 s (0.04-0.14 s at a load of 4 to 9 on 2 cores), well inside the 1 s
        ("hang", ["--workers", "2", "--timeout", "1"], "hangs: no batch for 1 s"),
    ],
)
@pytest.mark.slow
def test_a_failing_factory_is_one_line_and_exit_2_with_no_worker_left(
    data_dir: Path, capsys: pytest.CaptureFixture[str], factory: str, extra: list[str], says: str
) -> None:
    assert main(["loader", f"tinydata:{factory}", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err
    assert psutil.Process().children(recursive=True) == []


def test_without_torch_it_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # an environment without PyTorch
    assert main(["loader", "x:y"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'gpu-triage[torch]'" in err
