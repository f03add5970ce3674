"""Compressed shards (`.tar.gz`, `.tgz`, bzip2 and xz tars), told by their magic bytes, decompressed as they stream.

WebDataset reads them (through `tarfile`'s "r|*", which looks at the same magic bytes), and so do
`FluxShardDataset` and `ReadShards`: from the first byte, inflated piece by piece. Random access (an
index, `FluxShardMapDataset`) needs byte offsets into the tar itself: compressed shards are refused
there with an error that says so. zstd tars are refused everywhere (`tarfile` cannot read them either).
"""
from __future__ import annotations

import bz2
import itertools
import lzma
import zlib
from typing import Iterable, Iterator, Optional

from .errors import ShardError

# Bytes of a decompressed piece handed on at once: bounds the memory a highly compressed range can take.
PIECE = 8 * 2**20
MAGIC_BYTES = 10  # enough to tell every format below apart


def compression(head: bytes) -> Optional[str]:
    """"gzip", "bzip2", "xz" or "zstd" when `head` (a shard's first bytes) starts so; None for a plain tar."""
    head = bytes(head[:MAGIC_BYTES])
    if head.startswith(b"\x1f\x8b\x08"):
        return "gzip"
    if head[:3] == b"BZh" and head[4:10] == b"1AY&SY":
        return "bzip2"
    if head.startswith(b"\xfd7zXZ\x00"):
        return "xz"
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "zstd"
    return None


def refuse_compressed(url: str, head: bytes) -> None:
    """A ShardError for a compressed shard where byte offsets into the tar are needed (indexes, random access)."""
    kind = compression(head)
    if kind is not None:
        raise ShardError(url, 0, f"a {kind}-compressed tar: random access (an index, FluxShardMapDataset, "
                                 f"`fluxfs shard index`) needs uncompressed .tar shards; decompress it, or stream "
                                 f"it with FluxShardDataset or ReadShards")


class _Inflater:
    """One format's decompressor over concatenated streams (as `gzip -c a b` writes), NUL padding between."""

    def __init__(self, kind: str):
        self.kind = kind
        self.d = None
        self.started = False

    def _new(self):
        if self.kind == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        return bz2.BZ2Decompressor() if self.kind == "bzip2" else lzma.LZMADecompressor(lzma.FORMAT_XZ)

    def feed(self, data: bytes) -> Iterator[bytes]:
        while True:
            if self.d is None:  # between streams: padding, or the next stream's first byte
                data = bytes(data).lstrip(b"\0")
                if not data:
                    return
                self.d, self.started = self._new(), True
            out = self.d.decompress(data, PIECE)
            data = self.d.unconsumed_tail if self.kind == "gzip" else b""
            if out:
                yield out
            if self.d.eof:
                data, self.d = self.d.unused_data + data, None
            elif (not data) if self.kind == "gzip" else self.d.needs_input:
                return

    @property
    def complete(self) -> bool:
        return self.started and self.d is None


class TarBytes:
    """The tar bytes of a shard streamed from its first byte: (offset, bytes) pieces, decompressed if need be.

    `size` is the tar's length once every piece has been taken; `label` names the shard in errors
    (with "(gzip-decompressed)" when offsets count the decompressed tar).
    """

    def __init__(self, url: str, arriving: Iterable[tuple[int, bytes]], size: int):
        self.url, self.size, self.label = url, size, url
        self._arriving = iter(arriving)
        self._head: list[tuple[int, bytes]] = []
        got = 0
        for at, data in self._arriving:  # the first bytes, to tell a compressed shard
            self._head.append((at, data))
            got += len(data)
            if got >= MAGIC_BYTES:
                break
        self.kind = compression(b"".join(d for _, d in self._head))
        if self.kind == "zstd":
            raise ShardError(url, 0, "a zstd-compressed tar: not supported (tarfile and webdataset cannot read it "
                                     "either); decompress it, or recompress it with gzip")
        if self.kind is not None:
            self.label = f"{url} ({self.kind}-decompressed)"

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        head, self._head = self._head, []
        source = itertools.chain(head, self._arriving)
        if self.kind is None:
            yield from source
            return
        inflater, out, compressed_end = _Inflater(self.kind), 0, 0
        for at, data in source:
            compressed_end = at + len(data)
            try:
                for piece in inflater.feed(data):
                    yield out, piece
                    out += len(piece)
            except (zlib.error, OSError, EOFError, lzma.LZMAError) as e:
                raise ShardError(self.url, at, f"corrupt {self.kind} data ({e})") from None
        if not inflater.complete:
            raise ShardError(self.url, compressed_end, f"truncated: the {self.kind} stream ends before its end "
                                                       f"marker (the object holds {compressed_end} bytes)")
        self.size = out
