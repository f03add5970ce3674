"""A shard's index: every member's name, data offset and size, so any sample is one ranged read.

Stored beside the shard as `<shard>.idx`, JSON lines: a first line describing the shard
(`{"fluxfs_shard_index": 1, "size": ..., "generation": ..., "members": N, "samples": S}`) and one
`["name", offset, size]` line per member, in shard order. The shard's size and generation make a
stale index detectable: a shard replaced after indexing no longer matches. The sample count in the
first line lets a reader learn it from a small ranged read (indexes written before it have none).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property

from .errors import ShardError
from .samples import SampleSpan, group_samples
from .tarformat import BLOCK, Member

INDEX_SUFFIX = ".idx"
FORMAT_KEY = "fluxfs_shard_index"
VERSION = 1
SAMPLES_KEY = "samples"  # the header's sample count


def _is_utf8(name: str) -> bool:
    """Whether a name is text UTF-8 can hold; a tar name of other bytes (kept as `tarfile` keeps them, escaped
    as lone surrogates) is written as JSON escapes, which read back as the same name."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def index_path(shard: str) -> str:
    """Where a shard's index lives."""
    return shard + INDEX_SUFFIX


@dataclass
class ShardIndex:
    """The members of one shard, checked for order and bounds; `samples` groups them by key."""

    shard: str
    size: int
    members: list[Member]
    generation: str | None = None
    extra: dict = field(default_factory=dict)

    @cached_property
    def samples(self) -> list[SampleSpan]:
        return list(group_samples(self.members, head=0))

    def to_bytes(self) -> bytes:
        head = {FORMAT_KEY: VERSION, "size": self.size, "generation": self.generation,
                "members": len(self.members), SAMPLES_KEY: len(self.samples), **self.extra}
        lines = [json.dumps(head, separators=(",", ":"))]
        lines += [json.dumps([m.name, m.offset, m.size], ensure_ascii=not _is_utf8(m.name), separators=(",", ":"))
                  for m in self.members]
        return ("\n".join(lines) + "\n").encode()

    @classmethod
    def from_bytes(cls, shard: str, data: bytes) -> "ShardIndex":
        """Parse and check an index; any inconsistency is a ShardError naming the index."""
        where = index_path(shard)
        lines = data.decode("utf-8", "replace").splitlines()
        try:
            head = json.loads(lines[0]) if lines else None
        except ValueError:
            head = None
        if not isinstance(head, dict) or head.get(FORMAT_KEY) != VERSION:
            raise ShardError(where, None, "not a fluxfs shard index (first line is not its header)")
        size, count = head.get("size"), head.get("members")
        if not isinstance(size, int) or not isinstance(count, int) or count != len(lines) - 1:
            raise ShardError(where, None, f"header says {count} members and size {size}, "
                             f"found {len(lines) - 1} member lines")
        try:  # one parse of every member line (a DataLoader worker parses the indexes of its shards every epoch)
            rows = json.loads("[" + ",".join(lines[1:]) + "]")
            members = [Member(name, offset, length) for name, offset, length in rows
                       if type(name) is str and type(offset) is int and type(length) is int]
        except (ValueError, TypeError):
            members = []
        if len(members) != count:  # the line at fault, named
            members = []
            for n, line in enumerate(lines[1:], start=2):
                try:
                    name, offset, length = json.loads(line)
                    members.append(Member(str(name), int(offset), int(length)))
                except (ValueError, TypeError):
                    raise ShardError(where, None, f"line {n} is not [name, offset, size]") from None
        extra = {k: v for k, v in head.items() if k not in (FORMAT_KEY, "size", "generation", "members", SAMPLES_KEY)}
        index = cls(shard, size, members, head.get("generation"), extra)
        index.validate()
        if SAMPLES_KEY in head and head[SAMPLES_KEY] != len(index.samples):
            raise ShardError(where, None, f"header says {head[SAMPLES_KEY]!r} samples, the members make "
                                          f"{len(index.samples)}")
        return index

    def validate(self) -> None:
        """Members in order, each after a header and inside the shard, none overlapping; a shard of some bytes."""
        if self.size <= 0:
            raise ShardError(index_path(self.shard), None, f"describes a shard of {self.size} bytes: an empty "
                                                           f"object is not a tar shard")
        prev_end = 0
        for m in self.members:
            if m.size < 0 or m.offset < prev_end + BLOCK or m.end > self.size:
                raise ShardError(index_path(self.shard), m.offset,
                                 f"member {m.name!r} ({m.size} bytes) overlaps another or lies outside "
                                 f"the {self.size}-byte shard")
            prev_end = m.end

    def check_current(self, size: int, generation: str | None) -> None:
        """Refuse an index that describes an earlier version of the shard."""
        if size != self.size or (self.generation and generation and str(generation) != str(self.generation)):
            raise ShardError(self.shard, None,
                             f"the shard was replaced after it was indexed (index: {self.size} bytes, "
                             f"generation {self.generation}; now: {size} bytes, generation {generation}); "
                             f"rebuild the index with `fluxfs shard index`")
