"""crc32c of a whole object from the crc32c of its parts (zlib's `crc32_combine`, for the Castagnoli polynomial).

A fill receives an object's parts in any order and checksums each as it is written; the whole object's
crc32c is then combined from them without reading the file back. Appending `n` zero bytes to a crc is a
32x32 matrix over GF(2): the matrices for 2**k zero bytes are built once per process and applied per bit of `n`.
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


@functools.lru_cache(maxsize=None)
def _zeros_pow2(k: int) -> tuple[int, ...]:
    """The operator appending 2**k zero bytes to a crc (64 of them at most, each built once per process)."""
    if k == 0:
        one_bit = (_POLY,) + tuple(1 << i for i in range(31))  # one zero bit
        return _square(_square(_square(one_bit)))
    return _square(_zeros_pow2(k - 1))


def combine(crc_a: int, crc_b: int, len_b: int) -> int:
    """crc32c(a + b) from crc32c(a), crc32c(b) and len(b)."""
    k = 0
    while len_b > 0:  # 2**k zero bytes for each bit set in len_b: no matrix is built for a new length
        if len_b & 1:
            crc_a = _times(_zeros_pow2(k), crc_a)
        len_b >>= 1
        k += 1
    return crc_a ^ crc_b
