"""Reading one shard (or a part of one) as samples, with large ranged GETs in flight, samples cut as bytes arrive.

With an index, only the bytes of the wanted samples are read and each is handed out once its last
member has arrived. Without one the shard is read from its first byte and `TarScanner` finds the
members as the bytes come in. Every GET is pinned to the generation the shard was listed with, so a
shard replaced during the epoch is an error naming it, never a mix of two versions.
"""
from __future__ import annotations

import contextlib
import itertools
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional, Sequence

from fluxfs.errors import ObjectChanged
from fluxfs.handle import accelerated, cache_lock

from ..in_flight import in_order
from .catalog import ShardInfo
from .compressed import TarBytes
from .errors import ShardChanged, ShardError
from .index import ShardIndex
from .samples import SampleSpan, group_samples, sample_dict, split_key
from .tarformat import TarScanner
from .verify import check_span, check_tail, tail_start

# Ranged GETs of 8 MiB, 4 in flight per reader (a DataLoader worker): 32 MiB held per reader, and a
# first byte (~30 ms on the cloud profile) is a quarter of one range's transfer time or less.
DEFAULT_RANGE_SIZE = 8 * 2**20
DEFAULT_RANGES_IN_FLIGHT = 4


@dataclass(frozen=True)
class UnitRead:
    """What to read of one shard: part `part` of `parts` (all of it when parts=1), from the part's sample `first`.

    With an index a part is a contiguous run of samples; without one it is every parts-th sample
    (which needs no count). `count`: at most this many samples.
    """

    shard: ShardInfo
    url: str
    part: int = 0
    parts: int = 1
    first: int = 0
    count: Optional[int] = None


def part_bounds(n: int, part: int, parts: int) -> tuple[int, int]:
    """Samples [lo, hi) of a shard of `n` samples that contiguous part `part` of `parts` covers."""
    return n * part // parts, n * (part + 1) // parts


class _Received:
    """Bytes of one shard received so far, as (offset, bytes) pieces; cut without joining the whole."""

    def __init__(self) -> None:
        self.pieces: deque[tuple[int, bytes]] = deque()
        self.end = 0

    def add(self, at: int, data: bytes) -> None:
        self.pieces.append((at, data))
        self.end = at + len(data)

    def cut(self, lo: int, hi: int) -> tuple[bytes, int]:
        """(bytes covering [lo, hi), the offset they start at); a view of one piece when it holds them all."""
        if hi <= lo:  # a sample whose members are all empty
            return b"", lo
        at, last = self.pieces[-1] if self.pieces else (0, b"")
        if at <= lo and hi <= at + len(last):  # the usual case: within the range that arrived last
            return last, at
        parts = [(a, d) for a, d in self.pieces if a < hi and a + len(d) > lo]
        if len(parts) == 1:
            return parts[0][1], parts[0][0]
        start = max(lo, parts[0][0])
        return b"".join(memoryview(d)[max(0, start - a):hi - a] for a, d in parts), start

    def drop_before(self, offset: int) -> None:
        while self.pieces and self.pieces[0][0] + len(self.pieces[0][1]) <= offset:
            self.pieces.popleft()


class ShardReader:
    """Reads units of shards through one filesystem; `extensions` (if given) every sample must have."""

    def __init__(self, fs: Any, *, range_size: int = DEFAULT_RANGE_SIZE, in_flight: int = DEFAULT_RANGES_IN_FLIGHT,
                 extensions: Optional[Sequence[str]] = None):
        if range_size < 1 or in_flight < 1:
            raise ValueError(f"range_size and in_flight must be >= 1, not {range_size} and {in_flight}")
        self.fs, self.range_size, self.in_flight = fs, range_size, in_flight
        self.extensions = tuple(extensions) if extensions is not None else None

    # -- bytes ------------------------------------------------------------------------------

    def _fetch(self, job: tuple[ShardInfo, str, int, int]) -> bytes:
        shard, url, lo, hi = job
        try:
            if accelerated(self.fs) is not None:  # fluxfs: pinned to the listed generation
                data = self.fs.read_ranges(shard.path, [(lo, hi)], generation=shard.generation or None, max_gap=0)[0]
            else:
                with cache_lock(self.fs):  # ranges in flight on threads: an fsspec cache is not thread-safe
                    data = self.fs.cat_file(shard.path, start=lo, end=hi)
        except ObjectChanged:
            raise self._vanished(shard, url, lo) from None
        if len(data) != hi - lo:
            raise ShardError(url, lo + len(data), f"truncated: {len(data)} bytes where {hi - lo} were asked for "
                                                  f"(the listing said {shard.size} bytes)")
        return data

    def _vanished(self, shard: ShardInfo, url: str, offset: int) -> Exception:
        """The error for a pinned read that found nothing: the shard was replaced, or deleted."""
        try:
            now = self.fs.info(shard.path)
        except FileNotFoundError:
            return ShardChanged(url, offset, f"the shard was deleted during the epoch (listed as generation "
                                             f"{shard.generation})", shard.generation)
        return ShardChanged(url, offset, f"the shard was replaced during the epoch (read generation "
                                         f"{shard.generation}, now generation {now.get('generation')}, "
                                         f"{now.get('size')} bytes)",
                            shard.generation)

    def _read(self, job: tuple) -> bytes:
        _, shard, url, lo, hi = job
        return b"" if shard is None else self._fetch((shard, url, lo, hi))

    def _extent(self, unit: UnitRead, index: Optional[ShardIndex]
                ) -> tuple[int, int, Optional[list[SampleSpan]], Optional[int]]:
        """(first byte, end, the samples to cut, where the bytes after the index's last member start when the unit
        reaches them) of a unit: its samples with their headers (and the shard's end after its last sample,
        checked), or the whole shard without an index."""
        if index is None:
            return 0, unit.shard.size, None, None
        n = len(index.samples)
        lo, hi = part_bounds(n, unit.part, unit.parts)
        lo += unit.first
        if unit.count is not None:
            hi = min(hi, lo + max(0, unit.count))
        spans = index.samples[lo:hi]
        tail = tail_start(index.members) if hi >= n and unit.part == unit.parts - 1 else None
        end = index.size if tail is not None else spans[-1].end if spans else 0
        start = spans[0].read_from if spans else tail if tail is not None else 0
        return start, end, spans, tail

    # -- samples ----------------------------------------------------------------------------

    def _sample(self, span: SampleSpan, url: str, data: bytes, base: int) -> dict:
        sample = sample_dict(span, url, data, base)
        if self.extensions is None:
            return sample
        missing = [e for e in self.extensions if e not in sample]
        if missing:
            have = sorted(k for k in sample if not k.startswith("__"))
            raise ShardError(url, span.start, f"sample {span.key!r} has no {', '.join(map(repr, missing))} "
                                              f"member (it has {have})")
        return {k: v for k, v in sample.items() if k.startswith("__") or k in self.extensions}

    def samples(self, unit: UnitRead, index: Optional[ShardIndex]) -> Iterator[tuple[int, dict]]:
        """(ordinal within the part, sample) for the part's samples from `unit.first`, in shard order."""
        for _, ordinal, sample in self.stream_units([(None, unit, index)]):
            yield ordinal, sample

    def stream_units(self, units: Iterable[tuple[Any, UnitRead, Optional[ShardIndex]]]
                     ) -> Iterator[tuple[Any, int, dict]]:
        """(tag, ordinal, sample) of each (tag, unit, index) in turn; the next units' ranged GETs start while
        this one's samples are cut, so a shard boundary costs no round trip."""
        plans: deque = deque()

        def jobs() -> Iterator[tuple]:
            for n, (tag, unit, index) in enumerate(units):
                lo, hi, spans, tail = self._extent(unit, index)
                plans.append((tag, unit, spans, tail))
                if (unit.count is not None and unit.count <= 0) or hi <= lo:
                    yield (n, None, None, 0, 0)  # nothing to read: a marker, so the unit still has its turn
                    continue
                for a in range(lo, hi, self.range_size):
                    yield (n, unit.shard, unit.url, a, min(a + self.range_size, hi))

        reads = in_order(jobs(), self._read, self.in_flight, "fluxfs-shard")
        with contextlib.closing(reads):
            for _, group in itertools.groupby(reads, key=lambda r: r[0][0]):
                tag, unit, spans, tail = plans.popleft()
                received = ((job[3], data) for job, data in group if job[1] is not None)
                if unit.count is not None and unit.count <= 0:
                    continue
                if spans is not None:
                    yield from self._indexed(tag, unit, spans, received, tail)
                    continue
                for ordinal, sample in self._streamed(unit, received):
                    yield tag, ordinal, sample

    def _indexed(self, tag: Any, unit: UnitRead, spans: list[SampleSpan], arriving: Iterator[tuple[int, bytes]],
                 tail: Optional[int]) -> Iterator[tuple[Any, int, dict]]:
        """(tag, ordinal, sample) of the unit's samples `spans`, each cut (its headers checked against the index) once
        the bytes of its last member have arrived; then, when `tail` is given, the shard's bytes after the index's
        last member checked."""
        received = _Received()
        url, i, n, ordinal = unit.url, 0, len(spans), unit.first
        for at, data in arriving:
            received.add(at, data)
            end = received.end
            while i < n and spans[i].end <= end:  # every sample this range completes, in one pass
                yield tag, ordinal, self._checked(url, spans[i], received)
                i, ordinal = i + 1, ordinal + 1
            received.drop_before(spans[i].read_from if i < n else tail if tail is not None else end)
        for k, span in enumerate(spans[i:], start=ordinal):  # only samples of empty members are left
            yield tag, k, self._checked(url, span, received)
        if tail is not None and unit.shard.size > tail:
            piece, base = received.cut(tail, unit.shard.size)
            check_tail(unit.url, tail, piece, base, unit.shard.size)

    def _checked(self, url: str, span: SampleSpan, received: _Received) -> dict:
        piece, base = received.cut(span.read_from, span.end)
        check_span(url, span, piece, base)
        return self._sample(span, url, piece, base)

    def _streamed(self, unit: UnitRead, arriving: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, dict]]:
        """The whole shard from byte 0, members found by `TarScanner`; stops once the part's count is reached."""
        url = unit.url
        tar = TarBytes(url, arriving, unit.shard.size)  # gzip, bzip2 and xz tars are inflated as they arrive
        scanner = TarScanner(tar.label)
        received = _Received()
        run: list = []  # members of the sample being assembled (its key not ended yet)
        done: deque[SampleSpan] = deque()  # samples whose members are all known, waiting for their bytes
        shard_ordinal = 0
        stop = None if unit.count is None else unit.first + unit.count

        def ready(flush: bool) -> Iterator[tuple[int, dict]]:
            nonlocal shard_ordinal
            while done and (done[0].end <= received.end or flush):
                span = done.popleft()
                o, shard_ordinal = shard_ordinal, shard_ordinal + 1
                if o % unit.parts != unit.part:
                    continue
                ordinal = o // unit.parts
                if ordinal >= unit.first:
                    piece, base = received.cut(span.start, span.end)
                    yield ordinal, self._sample(span, url, piece, base)

        for at, data in tar:
            received.add(at, data)
            for member in scanner.feed(data, at):
                if run and split_key(member.name)[0] != split_key(run[0].name)[0]:
                    done.extend(group_samples(run))
                    run = []
                run.append(member)
            for item in ready(False):
                yield item
                if stop is not None and item[0] + 1 >= stop:
                    return
            keep = min([s.start for s in done] + [m.offset for m in run] + [received.end])
            received.drop_before(keep)
        scanner.finish(tar.size)
        done.extend(group_samples(run))
        for item in ready(True):
            yield item
            if stop is not None and item[0] + 1 >= stop:
                return
