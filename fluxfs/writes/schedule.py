"""How the part size grows during a write whose size is unknown (the "wb" handle), so that a strategy's
part cap (XML multipart: 10,000 parts; compose: the `compose_max_components` option, 32,768) is never
reached below GCS's 5 TiB object limit, and no part exceeds half the `write_memory` budget (pure).

The schedule starts at the configured part size `start`, doubles every `step` parts `doublings`
times, then stays at its peak ``start * 2**doublings`` until the cap. The fewest doublings that reach
`max_object` within `max_parts` parts keep the peak -- and so the memory a write holds -- as low as
possible; of those schedules, the one with the longest `step` keeps parts small for as long as
possible. The peak never exceeds `max_part` (half of write_memory: one part uploading, one being filled);
when that cap keeps a schedule from reaching 5 TiB, `reach` says how far it goes and the write fails
there, naming the settings to raise. With 5 TiB and the default 2 GiB write_memory (peak <= 1 GiB):

=============================  ======  =========  =====  ==============================================
strategy, start                cap     doublings  step   peak part (never above half of write_memory)
=============================  ======  =========  =====  ==============================================
xml, 8 MiB (the default)       10,000  7          812    1 GiB, from part 5,685 (after ~806 GiB written)
xml, 5 MiB (the minimum)       10,000  7          300    640 MiB, from part 2,101 (after ~186 GiB)
compose, 8 MiB (default)       32,768  5          3,048  256 MiB, from part 15,241 (after ~738 GiB)
compose, 256 KiB               32,768  10         1,365  256 MiB, from part 13,651 (after ~341 GiB)
compose, 8 MiB, server: 1,024  1,024   7          1      1 GiB from part 8; holds ~1,018 GiB, not 5 TiB
=============================  ======  =========  =====  ==============================================

Parts never shrink below `start`, so a strategy's minimum part size (settings.min_part_size) holds.
Whole-object uploads (pipe_file, put_file) know their size and use equal parts instead (`fixed_part_size`).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..gcs.limits import MAX_OBJECT_SIZE


def capacity(start: int, max_parts: int, step: int, doublings: int) -> int:
    """Bytes that `max_parts` parts of the schedule (start, step, doublings) hold in all."""
    ramp = min(doublings * step, max_parts)
    levels, rest = divmod(ramp, step) if step else (0, 0)
    total = start * step * ((1 << levels) - 1) + (start << levels) * rest
    if ramp == doublings * step:  # the ramp fits under the cap: the rest of the parts are at the peak
        total += (start << doublings) * (max_parts - ramp)
    return total


@lru_cache(maxsize=64)
def growth(start: int, max_parts: int, max_object: int = MAX_OBJECT_SIZE,
           max_part: int | None = None) -> tuple[int, int]:
    """(step, doublings) of the schedule for parts of `start` bytes under a cap of `max_parts`.

    With `max_part` (the memory budget's largest part) parts never exceed it; when that keeps the
    schedule from holding `max_object`, the one that holds the most (doubling every part) is used and
    `reach` tells how far it goes.
    """
    if start < 1 or max_parts < 1:
        raise ValueError(f"part size and part cap must be positive, not {start} and {max_parts}")
    if start * max_parts >= max_object:
        return 0, 0
    most = max_parts if max_part is None else min(max_parts, max(0, (max_part // start).bit_length() - 1))
    for k in range(1, most + 1):
        # capacity(step) = start * (2**k * max_parts - step * ((k - 1) * 2**k + 1)) falls as step grows:
        # the longest step that still holds max_object, if any.
        need = -(-max_object // start)
        step = ((1 << k) * max_parts - need) // ((k - 1) * (1 << k) + 1)
        step = min(step, max_parts // k)
        if step >= 1 and capacity(start, max_parts, step, k) >= max_object:
            return step, k
    if max_part is not None:
        return (1, most) if most else (0, 0)
    raise ValueError(f"{max_parts} parts starting at {start} bytes cannot hold {max_object} bytes")


def reach(start: int, max_parts: int, max_object: int = MAX_OBJECT_SIZE, max_part: int | None = None) -> int:
    """The most bytes a write of unknown size can hold: `max_object`, or less when `max_part` caps growth."""
    return min(max_object, capacity(start, max_parts, *growth(start, max_parts, max_object, max_part)))


def part_size(n: int, start: int, max_parts: int, max_object: int = MAX_OBJECT_SIZE,
              max_part: int | None = None) -> int:
    """The size of part `n` (1-based) of a write of unknown size: see the module docstring."""
    step, doublings = growth(start, max_parts, max_object, max_part)
    if not doublings:
        return start
    return start << min((n - 1) // step, doublings)


def max_part(fs: Any) -> int:
    """The largest part a write of `fs` may hold: half its write_memory (the other half: parts in flight)."""
    return int(fs.options.write_memory) // 2


def beyond_reach(what: str, size: int, max_parts: int, largest: int, memory: int, cap_setting: str | None) -> str:
    """The error for a write of `size` bytes more than `max_parts` parts of at most `largest` bytes hold."""
    cap = f"{max_parts} parts ({cap_setting})" if cap_setting else f"{max_parts} parts (the server's limit)"
    raise_ = f"raise write_memory or {cap_setting}" if cap_setting else "raise write_memory"
    return (f"{what}: {size} bytes do not fit in {cap} of at most {largest} bytes (half of write_memory={memory}); "
            f"{raise_} (parts grow up to half of write_memory) and write it again. Nothing was kept")


def fixed_part_size(size: int, start: int, max_parts: int) -> int:
    """Part size of a `size`-byte upload known in advance: `start`, or equal parts that fit the cap."""
    return max(start, -(-size // max_parts))
