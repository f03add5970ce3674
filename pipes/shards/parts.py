"""One packing split into parts (`fluxfs shard --part i/N`): who owns which samples, and where each part writes.

The source's samples are cut into N contiguous ranges of sample keys, balanced by bytes, at sample
keys (``bounds``: the first key of parts 1..N-1), so a sample's members are never split: a part owns
the samples whose key lies in its range, whatever objects appear later. The bounds are fixed once,
by the first part to plan, in the destination's partition file (`PARTITION_NAME`); every later
part, and every rerun, reads them there and lists only its own range (`listing_ranges`).

Part i writes to ``DIR/part-{i:04d}-of-{N:04d}/`` (DIR is the pattern's directory, the file
name pattern is kept) and, when it is complete, its manifest ``DIR/part-{i:04d}-of-{N:04d}.jsonl``.
"""
from __future__ import annotations

import bisect
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

PARTITION_NAME = "fluxfs-pack-parts.json"
MERGED_NAME = "shards.jsonl"
FORMAT_KEY = "fluxfs_pack_parts"
VERSION = 1
_PART = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_part(text: str, env: Optional[Mapping[str, str]] = None) -> tuple[int, int]:
    """``"3/8"`` -> (3, 8); ``"auto"`` reads torchrun's RANK and WORLD_SIZE. Anything else is a ValueError."""
    if str(text).strip().lower() == "auto":
        env = os.environ if env is None else env
        rank, world = env.get("RANK"), env.get("WORLD_SIZE")
        if rank is None or world is None:
            raise ValueError("--part auto reads RANK and WORLD_SIZE (set by torchrun), and they are not set: "
                             "give the part as i/N (a Kubernetes indexed Job: --part $JOB_COMPLETION_INDEX/N)")
        text = f"{rank}/{world}"
    m = _PART.match(str(text))
    if not m:
        raise ValueError(f"bad part {text!r}: expected i/N (part i of N, counted from 0), e.g. 0/4, or auto")
    return check_part((int(m.group(1)), int(m.group(2))))


def check_part(part: Any) -> tuple[int, int]:
    """A valid (i, N) with 0 <= i < N, or a ValueError naming it."""
    try:
        i, n = part
        ok = isinstance(i, int) and isinstance(n, int) and not isinstance(i, bool) and not isinstance(n, bool)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"part must be (i, N), two whole numbers, not {part!r}")
    if n < 1:
        raise ValueError(f"bad part {i}/{n}: the number of parts must be at least 1")
    if not 0 <= i < n:
        raise ValueError(f"bad part {i}/{n}: i counts parts from 0, so it must be between 0 and {n - 1}")
    return i, n


def part_name(i: int, n: int) -> str:
    return f"part-{i:04d}-of-{n:04d}"


def part_pattern(pattern: str, i: int, n: int) -> str:
    """Where part i of n writes: the pattern's directory gets a ``part-iiii-of-nnnn/`` level (n=1: unchanged)."""
    if n == 1:
        return pattern
    head, sep, tail = pattern.rpartition("/")
    return f"{head}{sep}{part_name(i, n)}/{tail}"


def owner(key: str, bounds: Sequence[str]) -> int:
    """The part owning sample `key`: part i has keys in [bounds[i-1], bounds[i])."""
    return bisect.bisect_right(bounds, key)


def choose_bounds(keys: Sequence[str], spans: Sequence[int], n: int) -> list[str]:
    """N-1 sample keys cutting sorted `keys` (with their bytes `spans`) into n runs of about equal bytes.

    Bounds repeat (parts left empty) when there are fewer samples than parts.
    """
    starts, total = [], 0
    for s in spans:
        starts.append(total)
        total += s
    bounds: list[str] = []
    for j in range(1, n):
        at = bisect.bisect_left(starts, total * j / n)
        at = max(at, 1 if keys else 0)
        bound = keys[at] if at < len(keys) else (keys[-1] + "\U0010ffff" if keys else "")
        bounds.append(max(bound, bounds[-1]) if bounds else bound)
    return bounds


Listing = tuple[str, Optional[str], Optional[str]]   # (key prefix, startOffset, endOffset)


def listing_ranges(base_key: str, lo: Optional[str], hi: Optional[str]) -> list[Listing]:
    """(key prefix, start, end) listings that together hold every object of the samples with keys in [lo, hi).

    A sample's objects are ``KEY`` and ``KEY.ext``: all at or above KEY, so at or above `lo`; below
    `hi`, except when KEY is a proper prefix of `hi` followed by a character up to '.', (KEY ``a/x``,
    `hi` ``a/x-2``: ``a/x.jpg`` sorts above ``a/x-2``): those are listed by prefix ``KEY.`` too. The
    listings hold other objects as well; the caller keeps those whose sample `owner` is the part.
    """
    out: list[Listing] = [
        (base_key, None if lo is None else base_key + lo, None if hi is None else base_key + hi)]
    for j in range(1, len(hi or "")):
        stem = hi[:j]
        if hi[j] <= "." and (lo is None or stem >= lo):
            out.append((base_key + stem + ".", None, None))
    return out


@dataclass(frozen=True)
class Partition:
    """The split of one packing: its source, number of parts, bounds, and class names (None: numeric labels)."""

    source: str
    parts: int
    bounds: tuple[str, ...]
    classes: Optional[tuple[str, ...]] = None

    def to_bytes(self) -> bytes:
        return (json.dumps({FORMAT_KEY: VERSION, "source": self.source, "parts": self.parts,
                            "bounds": list(self.bounds),
                            "classes": None if self.classes is None else list(self.classes)},
                           ensure_ascii=False, indent=1) + "\n").encode()

    @classmethod
    def from_bytes(cls, where: str, data: bytes) -> "Partition":
        """Parse and check a partition file; anything unexpected is a ValueError naming `where`."""
        try:
            head = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"{where} is not a fluxfs packing's partition file (not JSON: {exc})") from None
        if not isinstance(head, dict) or head.get(FORMAT_KEY) != VERSION:
            raise ValueError(f"{where} is not a fluxfs packing's partition file (no {FORMAT_KEY!r}: {VERSION})")
        source, parts, bounds, classes = (head.get(k) for k in ("source", "parts", "bounds", "classes"))
        ok = (isinstance(source, str) and isinstance(parts, int) and parts >= 1 and isinstance(bounds, list)
              and len(bounds) == parts - 1 and all(isinstance(b, str) for b in bounds) and bounds == sorted(bounds)
              and (classes is None or (isinstance(classes, list) and all(isinstance(c, str) for c in classes))))
        if not ok:
            raise ValueError(f"{where}: a partition file needs source, parts >= 1, parts-1 sorted string bounds "
                             f"and classes (a list of names or null)")
        return cls(source, parts, tuple(bounds), None if classes is None else tuple(classes))

    def range(self, i: int) -> tuple[Optional[str], Optional[str]]:
        """Part i's sample keys: [lo, hi), None for unbounded."""
        return (self.bounds[i - 1] if i > 0 else None), (self.bounds[i] if i < self.parts - 1 else None)

    def owns(self, i: int, key: str) -> bool:
        return owner(key, self.bounds) == i
