"""WebDataset's sample convention: consecutive members sharing a key form one sample.

`images/000123.jpg` and `images/000123.cls` are the sample `{"__key__": "images/000123", "jpg": ...,
"cls": ...}`: the key is the member's path up to the first dot of its file name, the extension is the
rest (`000123.seg.png` has extension `seg.png`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Optional

from .errors import ShardError
from .tarformat import Member


def split_key(name: str) -> tuple[str, str]:
    """(key, extension) of a member name; the extension is "" when the file name has no dot."""
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1 :]


@dataclass(frozen=True)
class SampleSpan:
    """One sample's members in a shard, and the byte range that holds all of their data."""

    key: str
    members: tuple[Member, ...]
    head: Optional[int] = None  # where its first member's header blocks start (None: not known)

    @property
    def start(self) -> int:
        return self.members[0].offset

    @property
    def read_from(self) -> int:
        """The first byte to read for this sample: its headers when known (so they can be checked), else its data."""
        return self.start if self.head is None else self.head

    @property
    def end(self) -> int:
        return self.members[-1].end

    def fields(self, shard: str) -> dict[str, Member]:
        """Extension -> member; a key with the same extension twice is a corrupt sample."""
        out: dict[str, Member] = {}
        for m in self.members:
            ext = split_key(m.name)[1]
            if ext in out:
                raise ShardError(shard, m.offset, f"sample {self.key!r} has two {ext!r} members")
            out[ext] = m
        return out


def group_samples(members: Iterable[Member], head: Optional[int] = None) -> Iterator[SampleSpan]:
    """Runs of consecutive members with the same key, in shard order.

    `head`: where the first member's header blocks start (0 for a whole shard's members); each later
    sample's headers start where the member before it ends, padded.
    """
    run: list[Member] = []
    key = None
    for m in members:
        k = split_key(m.name)[0]
        if run and k != key:
            yield SampleSpan(key, tuple(run), head)
            head = run[-1].offset + -(-run[-1].size // 512) * 512
            run = []
        key = k
        run.append(m)
    if run:
        yield SampleSpan(key, tuple(run), head)


def sample_dict(span: SampleSpan, shard: str, data: bytes | memoryview, base: int) -> dict:
    """The sample as WebDataset yields it, cut from `data` (which starts at shard offset `base`)."""
    view = memoryview(data)
    sample: dict = {"__key__": span.key, "__shard__": shard}
    for ext, m in span.fields(shard).items():
        lo = m.offset - base
        if lo < 0 or m.end - base > len(view):
            raise ShardError(shard, m.offset, f"member {m.name!r} is outside the bytes read")
        sample[ext] = bytes(view[lo : lo + m.size])
    return sample
