"""How the part size grows during a write whose size is unknown (the "wb" handle), so that a strategy's
part cap (XML multipart: 10,000 parts; compose: 1,024 components) is never reached below GCS's 5 TiB
object limit (pure).

The schedule starts at the configured part size `start`, doubles every `step` parts `doublings`
times, then stays at its peak ``start * 2**doublings`` until the cap. The fewest doublings that reach
`max_object` within `max_parts` parts keep the peak -- and the memory bound, about write_concurrency x
peak -- as low as possible; of those schedules, the one with the longest `step` keeps parts small for
as long as possible. With 5 TiB:

=========================  ======  =========  ====  ===================================================
strategy, start            cap     doublings  step  peak part: memory bound is write_concurrency x it
=========================  ======  =========  ====  ===================================================
xml, 8 MiB (the default)   10,000  7          812   1 GiB, from part 5,685 (after ~806 GiB written)
xml, 5 MiB (the minimum)   10,000  7          300   640 MiB, from part 2,101 (after ~186 GiB)
compose, 8 MiB (default)   1,024   10         42    8 GiB, from part 421 (after ~336 GiB)
compose, 256 KiB           1,024   15         27    8 GiB, from part 406 (after ~216 GiB)
=========================  ======  =========  ====  ===================================================

Parts never shrink below `start`, so a strategy's minimum part size (settings.min_part_size) holds.
Whole-object uploads (pipe_file, put_file) know their size and use equal parts instead (`fixed_part_size`).
"""
from __future__ import annotations

from functools import lru_cache

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
def growth(start: int, max_parts: int, max_object: int = MAX_OBJECT_SIZE) -> tuple[int, int]:
    """(step, doublings) of the schedule for parts of `start` bytes under a cap of `max_parts`."""
    if start < 1 or max_parts < 1:
        raise ValueError(f"part size and part cap must be positive, not {start} and {max_parts}")
    if start * max_parts >= max_object:
        return 0, 0
    for k in range(1, max_parts + 1):
        # capacity(step) = start * (2**k * max_parts - step * ((k - 1) * 2**k + 1)) falls as step grows:
        # the longest step that still holds max_object, if any.
        need = -(-max_object // start)
        step = ((1 << k) * max_parts - need) // ((k - 1) * (1 << k) + 1)
        step = min(step, max_parts // k)
        if step >= 1 and capacity(start, max_parts, step, k) >= max_object:
            return step, k
    raise ValueError(f"{max_parts} parts starting at {start} bytes cannot hold {max_object} bytes")


def part_size(n: int, start: int, max_parts: int, max_object: int = MAX_OBJECT_SIZE) -> int:
    """The size of part `n` (1-based) of a write of unknown size: see the module docstring."""
    step, doublings = growth(start, max_parts, max_object)
    if not doublings:
        return start
    return start << min((n - 1) // step, doublings)


def fixed_part_size(size: int, start: int, max_parts: int) -> int:
    """Part size of a `size`-byte upload known in advance: `start`, or equal parts that fit the cap."""
    return max(start, -(-size // max_parts))
