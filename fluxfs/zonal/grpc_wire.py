"""`BidiReadObjectResponse` decoded without copying its data twice: protobuf's parser copies every piece's bytes
out of the received message, and reading the `content` field copies them again; here each piece's content is
sliced out of the received message once, and only the other fields (metadata, read handle: small) go through
protobuf. Field numbers are the public `google.storage.v2` ones."""
from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional

from .gcs_adapter import bidi_read_types

_LEN, _VARINT, _I64, _I32 = 2, 0, 1, 5
_RANGES = 6                       # BidiReadObjectResponse.object_data_ranges
_DATA, _RANGE, _END = 1, 2, 3     # ObjectRangeData.checksummed_data, .read_range, .range_end
_CONTENT, _CRC = 1, 2             # ChecksummedData.content, .crc32c (fixed32)
_OFFSET = 1                       # ReadRange.read_offset


class Piece(NamedTuple):
    """One `ObjectRangeData`: its bytes, their crc32c as the server sent it (None: none), where they start."""

    offset: int
    content: bytes
    crc32c: Optional[int]
    range_end: bool


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ValueError("malformed varint in a BidiReadObjectResponse")


def _fields(buf: bytes, start: int, end: int):
    """(field number, wire type, value or (payload start, payload end), field start, field end) of buf[start:end]."""
    i = start
    while i < end:
        at = i
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, i = _varint(buf, i)
        elif wire == _LEN:
            n, i = _varint(buf, i)
            value, i = (i, i + n), i + n
        elif wire == _I32:
            value, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        elif wire == _I64:
            value, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        else:
            raise ValueError(f"unexpected wire type {wire} in a BidiReadObjectResponse")
        if i > end:
            raise ValueError("truncated BidiReadObjectResponse")
        yield number, wire, value, at, i


def _piece(buf: bytes, start: int, end: int) -> Piece:
    offset, content, crc, last = 0, b"", None, False
    for number, wire, value, _, _ in _fields(buf, start, end):
        if number == _DATA and wire == _LEN:
            for n, w, v, _, _ in _fields(buf, *value):
                if n == _CONTENT and w == _LEN:
                    content = buf[v[0]:v[1]]  # the one copy of the bytes out of the message
                elif n == _CRC and w == _I32:
                    crc = v
        elif number == _RANGE and wire == _LEN:
            for n, w, v, _, _ in _fields(buf, *value):
                if n == _OFFSET and w == _VARINT:
                    offset = v - (1 << 64) if v >= 1 << 63 else v
        elif number == _END and wire == _VARINT:
            last = bool(value)
    return Piece(offset, content, crc, last)


class ReadAnswer:
    """A decoded `BidiReadObjectResponse`: `pieces` (its object_data_ranges, in order) and `rest`, the protobuf
    message of its other fields (`metadata`, `read_handle`). `FromString` is the call's response deserializer."""

    __slots__ = ("pieces", "rest")

    def __init__(self, pieces: list, rest: Any) -> None:
        self.pieces, self.rest = pieces, rest

    @classmethod
    def FromString(cls, buf: bytes) -> "ReadAnswer":  # (the name grpc calls a response deserializer by)
        pieces, others = [], []
        for number, wire, value, at, end in _fields(buf, 0, len(buf)):
            if number == _RANGES and wire == _LEN:
                pieces.append(_piece(buf, *value))
            else:
                others.append(buf[at:end])
        message = _message()
        return cls(pieces, message.FromString(b"".join(others)) if others else message())


@functools.lru_cache(maxsize=None)
def _message() -> Any:
    """The protobuf class of `BidiReadObjectResponse` (for the fields other than the data)."""
    return bidi_read_types()[1]
