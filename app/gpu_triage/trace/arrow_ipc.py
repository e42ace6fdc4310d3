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
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from itertools import accumulate
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

# An encoder appends one column's field nodes (length, null count pairs, flat) and its buffers (unpadded, in
# the format's order) for the given values. Each column's encoder is made once per column layout: a tick runs
# about 120 of them, so the per-kind dispatch is done when they are made, and a list whose rows hold no items
# (most ticks' processes, stacks, networks) appends its children's fixed empty encoding instead of running them.
Encoder = Callable[[Sequence[Any], list[int], list[bytes]], None]


def _validity(values: Sequence[Any]) -> tuple[int, bytes]:
    """The null count and the validity bitmap (empty when nothing is null, as the format allows)."""
    nulls = 0
    for v in values:
        if v is None:
            nulls += 1
    if not nulls:
        return 0, b""
    bits = 0
    for i, v in enumerate(values):
        if v is not None:
            bits |= 1 << i
    return nulls, bits.to_bytes((len(values) + 7) // 8, "little")


def _packed(code: str, values: Iterable[Any]) -> bytes:
    data = array(code, values)
    if _SWAP:
        data.byteswap()
    return data.tobytes()


def _micros(ts: datetime) -> int:
    if ts.tzinfo is None:  # pyarrow stores a naive time in a UTC column as it reads: as UTC
        ts = ts.replace(tzinfo=UTC)
    return (ts - _EPOCH) // _ONE_US


def _offsets(lengths: Iterable[int]) -> bytes:
    out = array("i", [0])
    out.extend(accumulate(lengths))
    if _SWAP:
        out.byteswap()
    return out.tobytes()


def _fixed(encode: Encoder, values: Sequence[Any]) -> tuple[tuple[int, ...], tuple[bytes, ...]]:
    """What ``encode`` appends for ``values``, to append again without running it."""
    nodes: list[int] = []
    chunks: list[bytes] = []
    encode(values, nodes, chunks)
    return tuple(nodes), tuple(chunks)


def _scalar_encoder(col: Col) -> Encoder:
    kind = col.kind
    if kind in _INT_BITS or kind in _PRECISION or kind == "ts_us":
        code = _TYPECODES[kind]
        convert: Callable[[Any], Any] | None = int if kind in _INT_BITS else _micros if kind == "ts_us" else None
        zero = 0.0 if kind in _PRECISION else 0

        def encode(values: Sequence[Any], nodes: list[int], chunks: list[bytes]) -> None:
            nulls, bitmap = _validity(values)
            nodes += (len(values), nulls)
            chunks.append(bitmap)
            if convert is None:
                data: Iterable[Any] = [zero if v is None else v for v in values] if nulls else values
            else:
                data = [zero if v is None else convert(v) for v in values] if nulls else map(convert, values)
            chunks.append(_packed(code, data))

        return encode
    if kind == "str":

        def encode_str(values: Sequence[Any], nodes: list[int], chunks: list[bytes]) -> None:
            nulls, bitmap = _validity(values)
            nodes += (len(values), nulls)
            encoded = [b"" if v is None else str(v).encode("utf-8", "replace") for v in values]
            chunks += (bitmap, _offsets(map(len, encoded)), b"".join(encoded))

        return encode_str
    raise ValueError(f"no Arrow encoding for {kind!r} ({col.name})")


def _list_encoder(col: Col) -> Encoder:
    child = _encoder(col.children[0])
    empty_nodes, empty_chunks = _fixed(child, [])

    def encode(values: Sequence[Any], nodes: list[int], chunks: list[bytes]) -> None:
        nulls, bitmap = _validity(values)
        nodes += (len(values), nulls)
        if nulls:
            values = [() if v is None else v for v in values]
        chunks += (bitmap, _offsets(map(len, values)))
        flat = [item for v in values for item in v]
        if flat:
            child(flat, nodes, chunks)
        else:
            nodes += empty_nodes
            chunks += empty_chunks

    return encode


def _struct_encoder(col: Col) -> Encoder:
    children = [_encoder(c) for c in col.children]
    width = len(children)

    def each_child(values: Sequence[Any], nodes: list[int], chunks: list[bytes]) -> None:
        for child in children:
            child(values, nodes, chunks)

    null_nodes, null_chunks = _fixed(each_child, [None])

    def encode(values: Sequence[Any], nodes: list[int], chunks: list[bytes]) -> None:
        nulls, bitmap = _validity(values)
        nodes += (len(values), nulls)
        chunks.append(bitmap)
        if nulls == 1 == len(values):  # the one row is null: each child holds one null
            nodes += null_nodes
            chunks += null_chunks
            return
        if nulls:
            values = [(None,) * width if v is None else v for v in values]
        fields = list(zip(*values, strict=False)) if values else [()] * width
        if len(fields) < width:  # a row short of a field: refused, as reading its missing field would be
            raise IndexError(f"a row of {col.name} has fewer than its {width} fields")
        for field, child in zip(fields, children, strict=False):
            child(field, nodes, chunks)

    return encode


def _encoder(col: Col) -> Encoder:
    if col.kind == "list":
        return _list_encoder(col)
    if col.kind == "struct":
        return _struct_encoder(col)
    return _scalar_encoder(col)


_ENCODERS: dict[int, tuple[Sequence[Col], list[Encoder]]] = {}


def _encoders(columns: Sequence[Col]) -> list[Encoder]:
    """The columns' encoders, made on first use (kept by identity: hashing the nested layout costs more than
    encoding a tick; the entry holds the columns, so their id is not reused while it is cached). Only a tuple
    is kept: a list could change in place under the same identity."""
    if type(columns) is not tuple:
        return [_encoder(c) for c in columns]
    entry = _ENCODERS.get(id(columns))
    if entry is None or entry[0] is not columns:
        if len(_ENCODERS) >= 16:
            _ENCODERS.clear()
        entry = _ENCODERS[id(columns)] = (columns, [_encoder(c) for c in columns])
    return entry[1]


_PADDING = [bytes(n) for n in range(8)]


def batch_message(columns: Sequence[Col], rows: Sequence[Sequence[Any]]) -> bytes:
    """One record batch of ``rows`` (each a tuple in column order), as one encapsulated message."""
    nodes: list[int] = []
    chunks: list[bytes] = []
    for i, encode in enumerate(_encoders(columns)):
        encode([row[i] for row in rows], nodes, chunks)
    lengths = [len(data) for data in chunks]
    ends = list(accumulate([(n + 7) & -8 for n in lengths]))  # each buffer padded to 8 bytes
    buffers = [x for pair in zip([0, *ends], lengths, strict=False) for x in pair]  # offset, length pairs, flat
    body = b"".join([data + _PADDING[-n & 7] if n & 7 else data for data, n in zip(chunks, lengths, strict=True)])
    size = ends[-1] if ends else 0
    header = _Table((0, "q", len(rows)), (1, "o", _Structs(nodes)), (2, "o", _Structs(buffers)))
    return _message(_HEADER_RECORD_BATCH, header, size) + body


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
