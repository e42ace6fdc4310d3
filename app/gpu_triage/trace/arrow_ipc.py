"""An Arrow IPC *stream* writer in plain Python, for the columns of :mod:`gpu_triage.trace.layout`.

Why not pyarrow: importing it maps 31 MB of libraries (libarrow, libparquet, compute, substrait) into the
recorder, which then samples for hours while it uses a few kilobytes of them per tick: on the H200 that put
``record`` at 82.7 MB against its 80 MB target (docs/performance.md). The recorder only ever *appends* one small
record batch per tick, and the format for that is short and fixed (the Arrow columnar format, "IPC Streaming
Format"): an encapsulated ``Schema`` message, then one ``RecordBatch`` message per batch, then the
end-of-stream marker. Reading, converting and every check stay with pyarrow, which is the reference: the
tests read these bytes back with ``pyarrow.ipc`` and require the very table pyarrow's own writer makes.

What is written, and nothing more (no dictionaries, no compression, little-endian, metadata V5):

* types: unsigned ints of 16/32/64 bits, float32/64, utf8, timestamp[us, UTC], list, struct — each field
  nullable, a list's child named ``item`` as pyarrow names it;
* each message: ``0xFFFFFFFF``, the metadata's length, a FlatBuffer (``Message.fbs``/``Schema.fbs``) padded
  to 8 bytes, then the body: every buffer padded to 8 bytes, in the order of the format's spec (validity,
  then offsets, then data; a field's children after it);
* values as pyarrow converts Python objects: a float in an integer column is truncated, None is null, NaN
  stays a value, a naive ``datetime`` is read as UTC, a float beyond float32 becomes infinity.

The FlatBuffers are built front to back: a table's vtable just before it, each child after its parent (so
every unsigned offset points forward, as the format requires), every scalar aligned to its size, which
Arrow's FlatBuffers verifier checks before it reads a message.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from gpu_triage.trace.layout import Col

CONTINUATION = b"\xff\xff\xff\xff"
END_OF_STREAM = CONTINUATION + b"\x00\x00\x00\x00"

_METADATA_V5 = 4  # MetadataVersion.V5
_HEADER_SCHEMA = 1  # MessageHeader union
_HEADER_RECORD_BATCH = 3
# Type union codes (Schema.fbs)
_TYPE_INT = 2
_TYPE_FLOAT = 3
_TYPE_UTF8 = 5
_TYPE_TIMESTAMP = 10
_TYPE_LIST = 12
_TYPE_STRUCT = 13
_PRECISION = {"f32": 1, "f64": 2}  # Precision.SINGLE, DOUBLE
_UNIT_MICROSECOND = 2

# scalar kind -> (array typecode, Int bit width or None)
_TYPECODES: dict[str, str] = {"u16": "H", "u32": "I", "u64": "Q", "f32": "f", "f64": "d", "ts_us": "q"}
_INT_BITS = {"u16": 16, "u32": 32, "u64": 64}
_SWAP = sys.byteorder != "little"  # the stream says little-endian; a big-endian host swaps its arrays
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)

for _code, _size in (("H", 2), ("I", 4), ("Q", 8), ("f", 4), ("d", 8), ("q", 8), ("i", 4)):
    assert array(_code).itemsize == _size, (_code, _size)


# --- FlatBuffers, front to back -------------------------------------------------------------------------


class _Table:
    """A table to place: ``(slot, format, value)`` per present field. Formats: ``B`` u8/bool, ``h`` i16,
    ``i`` i32, ``q`` i64, ``o`` an offset to a child (a str/bytes, a :class:`_Table`, an :class:`_Offsets`
    or a :class:`_Structs`)."""

    __slots__ = ("fields",)

    def __init__(self, *fields: tuple[int, str, Any]) -> None:
        self.fields = fields


class _Offsets:
    """A vector of offsets to tables or strings."""

    __slots__ = ("items",)

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = items


class _Structs:
    """A vector of structs of two int64 each (``FieldNode``, ``Buffer``): the pairs, flat."""

    __slots__ = ("count", "flat")

    def __init__(self, flat: Sequence[int]) -> None:
        self.count = len(flat) // 2
        self.flat = flat


_SIZES = {"B": 1, "h": 2, "i": 4, "q": 8, "o": 4}


class _Builder:
    def __init__(self) -> None:
        self.buf = bytearray(4)  # the root offset, set by finish()

    def _pad_to(self, align: int, rest: int = 0) -> None:
        """Pad until the length is ``rest`` modulo ``align``."""
        self.buf.extend(bytes((rest - len(self.buf)) % align))

    def place(self, obj: Any) -> int:
        if isinstance(obj, _Table):
            return self._table(obj)
        if isinstance(obj, (str, bytes)):
            data = obj.encode() if isinstance(obj, str) else obj
            self._pad_to(4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(data)) + data + b"\x00"
            return pos
        if isinstance(obj, _Offsets):
            self._pad_to(4)
            pos = len(self.buf)
            self.buf += struct.pack("<I", len(obj.items)) + bytes(4 * len(obj.items))
            for i, item in enumerate(obj.items):
                self._patch(pos + 4 + 4 * i, self.place(item))
            return pos
        if isinstance(obj, _Structs):
            self._pad_to(8, 4)  # the elements (int64s) start 8-aligned, right after the u32 length
            pos = len(self.buf)
            self.buf += struct.pack(f"<I{len(obj.flat)}q", obj.count, *obj.flat)
            return pos
        raise TypeError(f"cannot place {type(obj).__name__}")

    def _patch(self, slot: int, target: int) -> None:
        struct.pack_into("<I", self.buf, slot, target - slot)

    def _table(self, table: _Table) -> int:
        # fields by size, largest first: after a start that puts the first field on 8 bytes, every field
        # falls on a multiple of its own size
        fields = sorted(table.fields, key=lambda f: -_SIZES[f[1]])
        slots = max((f[0] for f in fields), default=-1) + 1
        offsets = [0] * slots
        at = 4  # after the table's soffset to its vtable
        for slot, fmt, _ in fields:
            offsets[slot] = at
            at += _SIZES[fmt]
        self._pad_to(2)
        vtable = len(self.buf)
        self.buf += struct.pack(f"<{2 + slots}H", 4 + 2 * slots, at, *offsets)
        self._pad_to(8, 4)
        start = len(self.buf)
        self.buf += struct.pack("<i", start - vtable)
        children = []
        for slot, fmt, value in fields:
            if fmt == "o":
                children.append((start + offsets[slot], value))
                self.buf += bytes(4)
            else:
                self.buf += struct.pack("<" + fmt, value)
        for where, child in children:
            self._patch(where, self.place(child))
        return start

    def finish(self, root: _Table) -> bytes:
        self._patch(0, self.place(root))
        return bytes(self.buf)


def _message(header_type: int, header: _Table, body_length: int) -> bytes:
    """One encapsulated message's prefix and metadata (the body follows)."""
    meta = _Builder().finish(
        _Table((0, "h", _METADATA_V5), (1, "B", header_type), (2, "o", header), (3, "q", body_length))
    )
    meta += bytes(-len(meta) % 8)
    return CONTINUATION + struct.pack("<i", len(meta)) + meta


# --- the schema -----------------------------------------------------------------------------------------


def _type_table(col: Col) -> tuple[int, _Table]:
    kind = col.kind
    if kind in _INT_BITS:
        return _TYPE_INT, _Table((0, "i", _INT_BITS[kind]), (1, "B", 0))
    if kind in _PRECISION:
        return _TYPE_FLOAT, _Table((0, "h", _PRECISION[kind]))
    if kind == "str":
        return _TYPE_UTF8, _Table()
    if kind == "ts_us":
        return _TYPE_TIMESTAMP, _Table((0, "h", _UNIT_MICROSECOND), (1, "o", "UTC"))
    if kind == "list":
        return _TYPE_LIST, _Table()
    if kind == "struct":
        return _TYPE_STRUCT, _Table()
    raise ValueError(f"no Arrow type for {kind!r} ({col.name})")


def _field(col: Col) -> _Table:
    type_code, type_table = _type_table(col)
    return _Table(
        (0, "o", col.name),
        (1, "B", 1),  # nullable
        (2, "B", type_code),
        (3, "o", type_table),
        (5, "o", _Offsets([_field(c) for c in col.children])),  # Arrow wants the vector even when empty
    )


def schema_message(columns: Sequence[Col], metadata: dict[bytes, bytes]) -> bytes:
    """The stream's first message: the columns and the key-value metadata."""
    pairs = [_Table((0, "o", key), (1, "o", value)) for key, value in metadata.items()]
    schema = _Table((1, "o", _Offsets([_field(c) for c in columns])), (2, "o", _Offsets(pairs)))
    return _message(_HEADER_SCHEMA, schema, 0)


# --- record batches -------------------------------------------------------------------------------------


class _Body:
    """The buffers of one batch as they are appended, and the field nodes beside them."""

    __slots__ = ("buffers", "chunks", "nodes", "size")

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.buffers: list[int] = []  # offset, length pairs, flat
        self.nodes: list[int] = []  # length, null count pairs, flat
        self.size = 0

    def add(self, data: bytes) -> None:
        self.buffers += (self.size, len(data))
        pad = -len(data) % 8
        self.chunks.append(data + bytes(pad) if pad else data)
        self.size += len(data) + pad


def _validity(values: Sequence[Any], body: _Body) -> None:
    """The node of a column and its validity bitmap (empty when nothing is null, as the format allows)."""
    nulls = 0
    bits = 0
    for i, v in enumerate(values):
        if v is None:
            nulls += 1
        else:
            bits |= 1 << i
    body.nodes += (len(values), nulls)
    body.add(bits.to_bytes((len(values) + 7) // 8, "little") if nulls else b"")


def _packed(code: str, values: Sequence[Any]) -> bytes:
    data = array(code, values)
    if _SWAP:
        data.byteswap()
    return data.tobytes()


def _micros(ts: datetime) -> int:
    if ts.tzinfo is None:  # pyarrow stores a naive time in a UTC column as it reads: as UTC
        ts = ts.replace(tzinfo=UTC)
    return (ts - _EPOCH) // _ONE_US


def _offsets(lengths: Sequence[int]) -> bytes:
    out = array("i", [0])
    total = 0
    for n in lengths:
        total += n
        out.append(total)
    if _SWAP:
        out.byteswap()
    return out.tobytes()


def _encode(col: Col, values: Sequence[Any], body: _Body) -> None:  # noqa: C901 - one branch per Arrow kind
    _validity(values, body)
    kind = col.kind
    if kind in _INT_BITS:
        body.add(_packed(_TYPECODES[kind], [0 if v is None else int(v) for v in values]))
    elif kind in _PRECISION:
        body.add(_packed(_TYPECODES[kind], [0.0 if v is None else v for v in values]))
    elif kind == "ts_us":
        body.add(_packed("q", [0 if v is None else _micros(v) for v in values]))
    elif kind == "str":
        encoded = [b"" if v is None else str(v).encode("utf-8", "replace") for v in values]
        body.add(_offsets([len(b) for b in encoded]))
        body.add(b"".join(encoded))
    elif kind == "list":
        body.add(_offsets([0 if v is None else len(v) for v in values]))
        flat = [item for v in values if v is not None for item in v]
        _encode(col.children[0], flat, body)
    elif kind == "struct":
        for i, child in enumerate(col.children):
            _encode(child, [None if v is None else v[i] for v in values], body)
    else:
        raise ValueError(f"no Arrow encoding for {kind!r} ({col.name})")


def batch_message(columns: Sequence[Col], rows: Sequence[Sequence[Any]]) -> bytes:
    """One record batch of ``rows`` (each a tuple in column order), as one encapsulated message."""
    body = _Body()
    for i, col in enumerate(columns):
        _encode(col, [row[i] for row in rows], body)
    header = _Table((0, "q", len(rows)), (1, "o", _Structs(body.nodes)), (2, "o", _Structs(body.buffers)))
    return _message(_HEADER_RECORD_BATCH, header, body.size) + b"".join(body.chunks)


class StreamWriter:
    """Writes a stream to an open file descriptor: the schema now, one message per ``write_rows``, the
    end-of-stream marker at ``close``. Each message goes to the kernel whole, in one loop of ``os.write``,
    before the call returns; an OSError (disk full) is the caller's to report."""

    def __init__(self, fd: int, columns: Sequence[Col], metadata: dict[bytes, bytes]) -> None:
        self._fd = fd
        self._columns = tuple(columns)
        self.write(schema_message(self._columns, metadata))

    def write(self, message: bytes) -> None:
        """One whole message (from :func:`batch_message`) to the kernel."""
        view = memoryview(message)
        while view:
            view = view[os.write(self._fd, view) :]

    def write_rows(self, rows: Sequence[Sequence[Any]]) -> None:
        self.write(batch_message(self._columns, rows))

    def close(self) -> None:
        self.write(END_OF_STREAM)
