"""Each fact has one source: the trace fields are defined once in gpu_triage.model, and what is written
by hand elsewhere (the Tick's columns, the contract page in docs/) must agree with that definition; one
environment allow-list (hostmeta) and one CUDA-version parser (nvmlwrap) serve every reader."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from gpu_triage.doctor.facts import gather_software
from gpu_triage.hostmeta import training_env
from gpu_triage.model import DiskSample, GpuSample, NetSample, ProcSample, Tick, trace_fields
from gpu_triage.nvmlwrap import cuda_version_text
from gpu_triage.trace.schema import TRACE_SCHEMA

DOC = Path(__file__).resolve().parents[1] / "docs" / "trace-v1.md"
DOC_V2 = DOC.with_name("trace-v2.md")  # fields added in version 2 are listed there
DOC_TYPES = {
    "u16": "UInt16",
    "u32": "UInt32",
    "u64": "UInt64",
    "f32": "Float32",
    "f64": "Float64",
    "str": "String",
    "list[u32]": "List(UInt32)",
    "list[f32]": "List(Float32)",
}
TYPE_WORD = re.compile(r"List\(\w+\)|UInt\d+|Float\d+|String")


def test_tick_columns_are_the_schema_columns_in_order() -> None:
    assert [f.name for f in dataclasses.fields(Tick)] == TRACE_SCHEMA.names


def _doc_section(column: str, doc: Path = DOC) -> str:
    text = doc.read_text(encoding="utf-8")
    start = text.find(f"`{column}` entries")
    if start < 0:
        return ""
    ends = [i for i in (text.find("` entries", start + 10), text.find("\n## ", start), len(text)) if i > 0]
    return text[start : min(ends)]


@pytest.mark.parametrize(
    ("column", "kind"), [("gpus", GpuSample), ("disks", DiskSample), ("procs", ProcSample), ("nets", NetSample)]
)
def test_the_contract_page_lists_every_field_with_its_type(column: str, kind: type) -> None:
    section = _doc_section(column) + "\n" + _doc_section(column, DOC_V2)
    for f in trace_fields(kind):
        line = next((ln for ln in section.splitlines() if f"`{f.name}`" in ln), None)
        assert line is not None, f"docs/trace-v1.md / trace-v2.md: `{column}` entries do not list {f.name}"
        after = line[line.index(f"`{f.name}`") :]
        found = TYPE_WORD.search(after)
        assert found and found.group() == DOC_TYPES[f.trace_type], (f.name, found and found.group())


def test_the_doctor_keeps_the_recorders_environment_list() -> None:
    env = {
        "NCCL_DEBUG": "INFO",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "OMP_NUM_THREADS": "4",
        "UCX_TLS": "rc",
        "HOME": "/root",
        "NCCL_IB_AUTH_TOKEN": "s3cret",
        "TOKENIZERS_PARALLELISM": "false",  # on the list by name: "TOKEN" in it is no credential
        "MY_API_KEY": "k",
    }
    kept = {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "4", "UCX_TLS": "rc",
            "TOKENIZERS_PARALLELISM": "false"}
    assert training_env(env) == kept
    assert gather_software(env, None).env == kept  # credentials left out in the doctor too


@pytest.mark.parametrize(
    ("raw", "text"), [(12080, "12.8"), (13000, "13.0"), (12040, "12.4"), (0, None), (None, None), (True, None)]
)
def test_one_cuda_version_parser(raw: object, text: str | None) -> None:
    assert cuda_version_text(raw) == text
