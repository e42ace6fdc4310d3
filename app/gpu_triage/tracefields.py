"""How a sample class names each field's storage in the trace: the field helpers the model's classes are
declared with, and :func:`trace_fields`, which the Arrow schema, the rolling window and the tests read.

The sample classes (:mod:`gpu_triage.model`) are the one definition of the trace's fields: each field carries
its storage width in its metadata, and ``trace/layout.py`` builds the columns from them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# characters of any string a tick holds (a name, an id, a word of the verdict): the trace contract's limit, which
# the reader cuts to (trace/bounds.py) and the judge cuts the headroom's sentences to before they are recorded
TEXT_LIMIT = 256

#: Key of a dataclass field's metadata naming its trace storage width.
TRACE_TYPE = "trace_type"
#: The widths a field may have: unsigned integers, floats, text, lists of those, and two lists of structs
#: (a job's ranks, trace v2; a stack sample's threads, trace v4), each built from its own sample class.
TRACE_TYPES = frozenset({"u16", "u32", "u64", "f32", "f64", "str", "list[u32]", "list[f32]", "list[u16]",
                         "list[job_rank]", "list[stack_thread]"})


def trace_col(trace_type: str) -> Any:
    """An optional trace field: None (the hardware does not say) unless set."""
    return field(default=None, metadata={TRACE_TYPE: trace_type})


def trace_key(trace_type: str) -> Any:
    """A required trace field (the card's index, a disk's name): no default."""
    return field(metadata={TRACE_TYPE: trace_type})


def trace_list(trace_type: str) -> Any:
    return field(default_factory=list, metadata={TRACE_TYPE: trace_type})


@dataclass(frozen=True, slots=True)
class TraceField:
    """One field of a sample class as the trace stores it."""

    name: str
    trace_type: str  # one of TRACE_TYPES
    required: bool  # no default: the row is unusable without it (an index, a name, a pid)

    @property
    def is_list(self) -> bool:
        return self.trace_type.startswith("list[")

    @property
    def numeric(self) -> bool:
        return self.trace_type[0] in "uf"


def trace_fields(kind: type) -> tuple[TraceField, ...]:
    """The trace fields of a sample class (``GpuSample``, ``DiskSample``, ``ProcSample``: v1; ``JobSample``,
    ``JobRank``, ``NetSample``: v2; ``StackSample``, ``VerdictSample``: v3; ``ThreadSample``: v4), in file order."""
    out = []
    for f in dataclasses.fields(kind):
        trace_type = f.metadata[TRACE_TYPE]
        assert trace_type in TRACE_TYPES, (kind, f.name, trace_type)
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        out.append(TraceField(f.name, trace_type, required))
    return tuple(out)
