"""Deterministic synthetic object content, cheap enough to serve 1M objects without storing them.

Clients call :func:`synthetic_bytes` with the same arguments to verify what they read.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Tuple, Union

# A prime-sized repeating block: a slice misaligned by any amount short of a
# multiple of 4093 bytes differs from the expected bytes, yet content costs one
# small hash round per object plus a memcpy-speed repeat.
_BLOCK = 4093

SizeSpec = Union[int, Tuple[int, int]]


@lru_cache(maxsize=4096)
def _block(name: str, seed: int) -> bytes:
    key = hashlib.blake2b(f"{seed}\x00{name}".encode("utf-8", "surrogatepass"), digest_size=32).digest()
    # shake_256 is an extendable-output hash: one call yields the whole block.
    return hashlib.shake_256(key).digest(_BLOCK)


def synthetic_range(name: str, size: int, seed: int, start: int, end: int) -> bytes:
    """Bytes [start, end) of the synthetic object ``name`` of ``size`` bytes."""
    end = min(end, size)
    if start >= end:
        return b""
    block = _block(name, seed)
    off = start % _BLOCK
    n = end - start
    if off + n <= _BLOCK:
        return block[off:off + n]
    # The block rotated to start at `off`, repeated: two copies of n bytes (not three), the
    # server's main CPU cost when it streams big synthetic objects.
    rotated = block[off:] + block[:off]
    return (rotated * -(-n // _BLOCK))[:n]


def synthetic_bytes(name: str, size: int, seed: int = 0) -> bytes:
    """The full content of a synthetic object (what ``ServerHandle.generate`` stores)."""
    return synthetic_range(name, size, seed, 0, size)


def synthetic_size(name: str, size: SizeSpec, seed: int = 0) -> int:
    """Resolve a size spec: an int, or a (min, max) range drawn deterministically from seed and name."""
    if isinstance(size, int):
        return size
    lo, hi = size
    if lo > hi or lo < 0:
        raise ValueError(f"bad size range {size!r}")
    h = hashlib.blake2b(f"{seed}\x01{name}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return lo + int.from_bytes(h, "big") % (hi - lo + 1)
