"""Deterministic synthetic object content, cheap enough to serve 1M objects without storing them.

Clients call :func:`synthetic_bytes` with the same arguments to verify what they read.
"""
from __future__ import annotations

import hashlib
import random
from functools import lru_cache
from typing import Optional, Tuple, Union

# Content is a window into one shared pool of pseudo-random bytes, at an offset hashed from
# the name and seed: serving an object is a view of the pool, no copy (the pool is what makes
# a 2 GB read benchmark cheap for the server, as GCS's CPU is not the client's). The pool does
# not repeat within itself, so a slice misaligned by any amount reads different bytes; its
# length is odd so that no power-of-two shift of a wrapped (larger) object lines up either.
_POOL_SIZE = 32 * 2**20 + 4093
_pool: Optional[bytes] = None

SizeSpec = Union[int, Tuple[int, int]]


def _the_pool() -> bytes:
    global _pool
    if _pool is None:
        _pool = random.Random(0x5EED).randbytes(_POOL_SIZE)  # ~30 ms, once per process
    return _pool


@lru_cache(maxsize=65536)
def _offset(name: str, seed: int) -> int:
    h = hashlib.blake2b(f"{seed}\x00{name}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(h, "big") % _POOL_SIZE


def synthetic_range(name: str, size: int, seed: int, start: int, end: int) -> Union[bytes, memoryview]:
    """Bytes [start, end) of the synthetic object ``name`` of ``size`` bytes: a read-only view of
    the pool when the range does not wrap around its end, else a copy."""
    end = min(end, size)
    if start >= end:
        return b""
    pool = _the_pool()
    pos = (_offset(name, seed) + start) % _POOL_SIZE
    n = end - start
    if pos + n <= _POOL_SIZE:
        return memoryview(pool)[pos:pos + n]
    pieces = [memoryview(pool)[pos:]]
    n -= _POOL_SIZE - pos
    while n > 0:
        pieces.append(memoryview(pool)[:min(n, _POOL_SIZE)])
        n -= len(pieces[-1])
    return b"".join(pieces)


def synthetic_bytes(name: str, size: int, seed: int = 0) -> bytes:
    """The full content of a synthetic object (what ``ServerHandle.generate`` stores)."""
    return bytes(synthetic_range(name, size, seed, 0, size))


def synthetic_size(name: str, size: SizeSpec, seed: int = 0) -> int:
    """Resolve a size spec: an int, or a (min, max) range drawn deterministically from seed and name."""
    if isinstance(size, int):
        return size
    lo, hi = size
    if lo > hi or lo < 0:
        raise ValueError(f"bad size range {size!r}")
    h = hashlib.blake2b(f"{seed}\x01{name}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return lo + int.from_bytes(h, "big") % (hi - lo + 1)
