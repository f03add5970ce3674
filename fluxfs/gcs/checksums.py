"""crc32c as GCS uses it: computed, combined from pieces, and encoded as base64 text.

Combining is standard CRC algebra on the reflected Castagnoli polynomial,
crc(A + B) = crc(A) * x^(8 len(B)) mod P  xor  crc(B): a multipart upload's or a composite's
checksum follows from its parts' without reading any byte again.
"""
from __future__ import annotations

import base64
from functools import lru_cache
from typing import Iterable, Optional, Sequence

import google_crc32c

try:  # ICRAR's crc32c (the `fast` extra): ~3x google_crc32c's speed on SSE4.2 (0.04 against 0.11-0.15 CPU s/GB)
    import crc32c as _fast
except ImportError:  # pragma: no cover - depends on the extra
    _fast = None

IMPLEMENTATION = "crc32c" if _fast is not None else "google_crc32c"

_POLY = 0x82F63B78   # CRC-32C (Castagnoli), bit-reflected
_ONE = 0x80000000    # the polynomial 1 in the reflected representation


if _fast is not None:
    def extend(value: int, data: bytes) -> int:
        """crc32c of the bytes so far (crc `value`) followed by `data`: the one running-crc step of every reader."""
        return _fast.crc32c(data, value)

    extend_view = extend
else:
    extend = google_crc32c.extend

    def extend_view(value: int, data: memoryview) -> int:  # type: ignore[misc]
        """`extend` over a view of writable memory: google_crc32c takes bytes only, so the slice is copied
        (hot in cache, just received into)."""
        return google_crc32c.extend(value, bytes(data))


def crc32c(data: bytes) -> int:
    """crc32c of `data`; google_crc32c's C extension only takes `bytes` (no views), hence the type."""
    return extend(0, data)


def crc_to_b64(value: int) -> str:
    """GCS's text form of a crc32c: base64 of the big-endian 4 bytes."""
    return base64.b64encode(value.to_bytes(4, "big")).decode("ascii")


def crc_from_b64(text: Optional[str]) -> Optional[int]:
    """A crc32c from GCS's base64 text (None or "" stays None)."""
    if not text:
        return None
    return int.from_bytes(base64.b64decode(text), "big")


def _multiply(a: int, b: int) -> int:
    """a(x) * b(x) mod P (both reflected)."""
    product = 0
    while a:
        if a & _ONE:
            product ^= b
        a = (a << 1) & 0xFFFFFFFF
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return product


def _powers() -> list[int]:
    """x^(2^k) mod P for k = 0..63."""
    out = [_ONE >> 1]   # x^1
    for _ in range(63):
        out.append(_multiply(out[-1], out[-1]))
    return out


_X_2K = _powers()


@lru_cache(maxsize=4096)  # piece lengths repeat (same-size objects, equal parts): most shifts are cached
def _shift(nbytes: int) -> int:
    """x^(8 nbytes) mod P: what appending `nbytes` bytes multiplies a crc by."""
    p, k, n = _ONE, 3, nbytes   # 8 * nbytes = nbytes << 3
    while n:
        if n & 1:
            p = _multiply(_X_2K[k & 63], p)
        n >>= 1
        k += 1
    return p


def crc32c_combine(crc_a: int, crc_b: int, len_b: int) -> int:
    """crc32c(A + B) from crc32c(A), crc32c(B) and len(B)."""
    if len_b <= 0:
        return crc_a
    return _multiply(_shift(len_b), crc_a) ^ crc_b


def combine_all(pieces: Iterable, crcs: Sequence[int], value: int = 0) -> int:
    """crc32c of `value`'s bytes followed by `pieces` (sized buffers), each piece's crc32c given in `crcs`."""
    pieces = list(pieces)
    if len(pieces) != len(crcs):
        raise ValueError(f"{len(pieces)} pieces but {len(crcs)} crc32c values")
    for piece, crc in zip(pieces, crcs):
        value = crc32c_combine(value, crc, len(piece))
    return value
