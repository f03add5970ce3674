"""crc32c of a whole object from the crc32c of its parts (zlib's `crc32_combine`, for the Castagnoli polynomial).

A fill receives an object's parts in any order and checksums each as it is written; the whole object's
crc32c is then combined from them without reading the file back. The operator that appends `n` zero bytes
to a crc is a 32x32 matrix over GF(2), built once per length (a fill's parts all have one length but the last).
"""
from __future__ import annotations

import functools

_POLY = 0x82F63B78  # crc32c (Castagnoli), reflected


def _times(matrix: tuple[int, ...], vec: int) -> int:
    out, i = 0, 0
    while vec:
        if vec & 1:
            out ^= matrix[i]
        vec >>= 1
        i += 1
    return out


def _square(matrix: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(_times(matrix, matrix[i]) for i in range(32))


@functools.lru_cache(maxsize=64)
def _zeros(n: int) -> tuple[int, ...]:
    """The operator appending `n` zero bytes to a crc (n >= 1)."""
    one_bit = (_POLY,) + tuple(1 << i for i in range(31))  # one zero bit
    op = _square(_square(_square(one_bit)))  # one zero byte
    result = None
    while n:
        if n & 1:
            result = op if result is None else tuple(_times(op, result[i]) for i in range(32))
        n >>= 1
        if n:
            op = _square(op)
    return result  # type: ignore[return-value]


def combine(crc_a: int, crc_b: int, len_b: int) -> int:
    """crc32c(a + b) from crc32c(a), crc32c(b) and len(b)."""
    if len_b <= 0:
        return crc_a
    return _times(_zeros(len_b), crc_a) ^ crc_b
