"""WebDataset's sample convention: consecutive members sharing a key form one sample.

`images/000123.jpg` and `images/000123.cls` are the sample `{"__key__": "images/000123", "jpg": ...,
"cls": ...}`: the key is the member's path up to the first dot of its file name, the extension is the
rest (`000123.seg.png` has extension `seg.png`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional, Union

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

    def __post_init__(self) -> None:
        # Worked out once per span, not each time the sample is cut (an index's spans serve every epoch).
        first, last = self.members[0], self.members[-1]
        exts = [split_key(m.name)[1] for m in self.members]
        twice = next((m for k, m in enumerate(self.members) if exts[k] in exts[:k]), None)
        cuts = twice or tuple((e, m.offset, m.size) for e, m in zip(exts, self.members))
        for name, value in (("start", first.offset), ("end", last.offset + last.size), ("_cuts", cuts),
                            ("read_from", first.offset if self.head is None else self.head)):
            object.__setattr__(self, name, value)

    # Set by __post_init__: where the first member's data starts, where the last one's ends, the first byte to read
    # (the headers when known, so they can be checked, else the data), and each member's (extension, offset, size)
    # or the first member repeating an extension (a corrupt sample).
    start: int = field(init=False, repr=False, compare=False)
    end: int = field(init=False, repr=False, compare=False)
    read_from: int = field(init=False, repr=False, compare=False)
    _cuts: Union[tuple[tuple[str, int, int], ...], Member] = field(init=False, repr=False, compare=False)

    def cuts(self, shard: str) -> tuple[tuple[str, int, int], ...]:
        """(extension, data offset, size) of each member; a key with the same extension twice is a corrupt sample."""
        cuts = self._cuts
        if isinstance(cuts, Member):
            raise ShardError(shard, cuts.offset, f"sample {self.key!r} has two {split_key(cuts.name)[1]!r} members")
        return cuts


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
    """The sample as WebDataset yields it, cut from `data` (which starts at shard offset `base`): one copy a member."""
    sample: dict = {"__key__": span.key, "__shard__": shard}
    have = len(data)
    for ext, offset, size in span.cuts(shard):
        lo = offset - base
        if lo < 0 or lo + size > have:
            name = next(m.name for m in span.members if m.offset == offset)
            raise ShardError(shard, offset, f"member {name!r} is outside the bytes read")
        sample[ext] = data[lo:lo + size] if isinstance(data, bytes) else bytes(data[lo:lo + size])
    return sample
