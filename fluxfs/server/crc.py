"""crc32c of a concatenation from the crc32c of its pieces, as GCS derives a composite's checksum.

Composing 32 objects or completing a multipart upload then costs a few multiplications in
GF(2)[x] per piece instead of re-reading every byte (google_crc32c also takes only `bytes`, so a
body kept as views would need a copy first). Standard CRC algebra on the reflected Castagnoli
polynomial: crc(A + B) = crc(A) * x^(8 len(B)) mod P  xor  crc(B).
"""
from __future__ import annotations

from functools import lru_cache

_POLY = 0x82F63B78   # CRC-32C (Castagnoli), bit-reflected
_ONE = 0x80000000    # the polynomial 1 in the reflected representation


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


def concat(crc_a: int, crc_b: int, len_b: int) -> int:
    """crc32c(A + B) from crc32c(A), crc32c(B) and len(B)."""
    if not len_b:
        return crc_a
    return _multiply(_shift(len_b), crc_a) ^ crc_b
