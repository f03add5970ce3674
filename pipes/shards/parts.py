"""One packing split into parts (`fluxfs shard --part i/N`): the one listing every part packs, who owns what, and
where each part writes.

The first part to plan lists the source once and pins that listing (each object's size, generation and
crc32c), the class names and the sample order (shuffled by a seed, or key order) in the destination's
plan file (`PARTITION_NAME`), written create-only; every part, and every rerun, reads it there. The
samples, in that order, are cut into N contiguous runs of about equal bytes (`cuts`), so a sample's
members are never split and the parts' samples, one after the other, are those of one packing.

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
VERSION = 2   # 1: key ranges, each part listing its own (mixing listings when the source changed)
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


def cuts(spans: Sequence[int], n: int) -> list[int]:
    """The n+1 sample positions cutting samples of `spans` bytes (in packing order) into n runs of about equal
    bytes; a run is empty when there are fewer samples than parts."""
    starts, total = [], 0
    for s in spans:
        starts.append(total)
        total += s
    out = [0]
    for j in range(1, n):
        at = max(bisect.bisect_left(starts, total * j / n), 1 if spans else 0)
        out.append(max(min(at, len(spans)), out[-1]))
    return out + [len(spans)]


Pin = tuple[str, int, Optional[str], Optional[str]]   # (key below the source, size, generation, crc32c)


@dataclass(frozen=True)
class Partition:
    """One packing in parts: its source, number of parts, class names (None: numeric labels), the sample
    order's seed (None: key order), and the pinned listing, sorted by key."""

    source: str
    parts: int
    classes: Optional[tuple[str, ...]]
    seed: Optional[int]
    objects: tuple[Pin, ...]

    def to_bytes(self) -> bytes:
        head = json.dumps({FORMAT_KEY: VERSION, "source": self.source, "parts": self.parts,
                           "classes": None if self.classes is None else list(self.classes),
                           "order": "key" if self.seed is None else "shuffled", "seed": self.seed,
                           "objects": len(self.objects)}, ensure_ascii=False)
        rows = ",\n ".join(json.dumps(list(o), ensure_ascii=False) for o in self.objects)  # one object a line
        return f'{head[:-1]}, "listing": [\n {rows}]}}\n'.encode()   # head[:-1]: the head without its closing brace

    @classmethod
    def from_bytes(cls, where: str, data: bytes) -> "Partition":
        """Parse and check a plan file; anything unexpected is a ValueError naming `where`."""
        try:
            head = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError(f"{where} is not a fluxfs packing's partition file (not JSON: {exc})") from None
        was = head.get(FORMAT_KEY) if isinstance(head, dict) else None
        if isinstance(was, int) and not isinstance(was, bool) and was < VERSION:
            raise ValueError(f"{where} was written by an older fluxfs (format {was}: a split without a pinned "
                             f"listing, whose parts could pack two listings): pack again into a new destination")
        if was != VERSION:
            raise ValueError(f"{where} is not a fluxfs packing's partition file (no {FORMAT_KEY!r}: {VERSION})")
        source, parts, classes, seed, listing = (head.get(k) for k in ("source", "parts", "classes", "seed",
                                                                       "listing"))
        ok = (isinstance(source, str) and isinstance(parts, int) and parts >= 1
              and (classes is None or (isinstance(classes, list) and all(isinstance(c, str) for c in classes)))
              and (seed is None or (isinstance(seed, int) and not isinstance(seed, bool)))
              and isinstance(listing, list) and all(_pin_ok(r) for r in listing))
        if not ok:
            raise ValueError(f"{where}: a partition file needs source, parts >= 1, classes (a list of names or null), "
                             f"seed (a whole number or null) and listing ([key, size, generation, crc32c] rows)")
        return cls(source, parts, None if classes is None else tuple(classes), seed,
                   tuple((r[0], r[1], r[2], r[3]) for r in listing))

    def infos(self) -> list[dict]:
        """The pinned listing as info dicts ("bucket/key" names), as a listing gives them."""
        return [{"name": self.source + key, "size": size, "generation": gen, "crc32c": crc, "type": "file"}
                for key, size, gen, crc in self.objects]


def _pin_ok(row: Any) -> bool:
    return (isinstance(row, list) and len(row) == 4 and isinstance(row[0], str)
            and isinstance(row[1], int) and not isinstance(row[1], bool) and row[1] >= 0
            and all(v is None or isinstance(v, str) for v in row[2:]))
