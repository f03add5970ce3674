"""`ShardWriter`: samples (dicts) in, tar shards and their indexes out, each shard one atomic upload.

Members stream into the upload as they come (memory is the filesystem's part buffers, never a
whole shard); a shard becomes visible only when complete (fluxfs's "wb" is a multipart upload that
an exception aborts), and its index (`<shard>.idx`, with the generation the upload produced) is
written after it. Samples follow WebDataset's convention: ``{"__key__": "000123", "jpg": b"...",
"cls": 3}`` becomes members ``000123.jpg`` and ``000123.cls``.
"""
from __future__ import annotations

import io
import json
import logging
from typing import Any, Iterable, Optional

from fluxfs.handle import FilesystemHandle

from ..options import merge_storage_options
from .index import ShardIndex, index_path
from .samples import split_key
from .tarformat import BLOCK, END_OF_ARCHIVE, Member, member_header, padded

logger = logging.getLogger(__name__)

DEFAULT_MAX_SIZE = 256 * 10**6
DEFAULT_MAX_SAMPLES = 100_000


def encode_field(key: str, ext: str, value: Any) -> bytes:
    """One sample field as member bytes: bytes as they are, text as UTF-8, numbers as their decimal text,
    dicts and lists as JSON, numpy arrays as .npy, tensors as torch.save; anything else is a TypeError."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bool, int, float)):
        return str(int(value) if isinstance(value, bool) else value).encode()
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value).encode()
    kind = type(value).__module__.split(".")[0]
    if kind == "numpy":
        import numpy as np

        buf = io.BytesIO()
        np.save(buf, value, allow_pickle=False)
        return buf.getvalue()
    if kind == "torch":
        import torch

        buf = io.BytesIO()
        torch.save(value, buf)
        return buf.getvalue()
    raise TypeError(f"sample {key!r}: field {ext!r} is a {type(value).__name__}; give bytes, str, a number, "
                    f"a dict/list (JSON), a numpy array or a tensor")


def sample_members(sample: dict) -> list[tuple[str, bytes]]:
    """(member name, bytes) of each field of `sample`; a bad key or extension is a ValueError naming it."""
    key = sample.get("__key__") if isinstance(sample, dict) else None
    if not isinstance(key, str) or not key:
        raise ValueError(f"a sample needs a non-empty string '__key__', got {key!r}")
    if split_key(key + ".x")[0] != key or key.endswith("/"):
        raise ValueError(f"sample key {key!r} has a '.' in its last path component (or ends in '/'): "
                         f"WebDataset readers would split it there")
    out = []
    for ext, value in sample.items():
        if ext.startswith("__"):
            continue
        if not ext or "/" in ext or not isinstance(ext, str):
            raise ValueError(f"sample {key!r}: bad field name {ext!r} (an extension such as 'jpg')")
        name = f"{key}.{ext}"
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"sample {key!r}: member name {name!r} is not valid text (lone surrogates, from bytes "
                             f"that are not UTF-8); tar names are written as UTF-8") from None
        out.append((name, encode_field(key, ext, value)))
    if not out:
        raise ValueError(f"sample {key!r} has no fields besides its key")
    return out


def starts_new_shard(size: int, samples: int, span: int, max_size: int, max_samples: int) -> bool:
    """Whether a sample taking `span` bytes goes into a new shard rather than the current one (`size`
    bytes, `samples` samples so far): when it would pass either limit, unless the shard is empty."""
    return samples > 0 and (samples >= max_samples or size + span + len(END_OF_ARCHIVE) > max_size)


def member_span(name: str, size: int) -> int:
    """Bytes one member takes in a shard: its header block(s) and its padded data."""
    if len(name) <= 100 and name.isascii() and size < 8**11:  # fits a plain ustar header: one block
        return BLOCK + padded(size)
    return len(member_header(name, size)) + padded(size)


class ShardFile:
    """One shard being written: members stream into `fs.open(path, "wb")`; `close` writes the index."""

    def __init__(self, fs, path: str, url: str, index: bool = True, extra: Optional[dict] = None):
        self.fs, self.path, self.url, self.index = fs, path, url, index
        self.extra = dict(extra or {})
        self.size = 0
        self.members: list[Member] = []
        self.samples = 0
        self._f = fs.open(path, "wb")

    def add(self, name: str, data: bytes) -> None:
        header = member_header(name, len(data))
        self._f.write(header)
        self.members.append(Member(name, self.size + len(header), len(data)))
        self._f.write(data)
        pad = padded(len(data)) - len(data)
        if pad:
            self._f.write(b"\0" * pad)
        self.size += len(header) + len(data) + pad

    def close(self) -> ShardIndex:
        """Finish the shard (visible now), then write its index; returns the index."""
        self._f.write(END_OF_ARCHIVE)
        self.size += len(END_OF_ARCHIVE)
        try:
            self._f.close()
        except BaseException:
            self.abort()
            raise
        generation = getattr(self._f, "generation", None)
        idx = ShardIndex(self.url, self.size, self.members, None if generation is None else str(generation),
                         self.extra)
        if self.index:
            self.fs.pipe_file(index_path(self.path), idx.to_bytes())
        return idx

    def abort(self) -> None:
        """Leave nothing: an atomic upload is aborted; a plain filesystem's partial file is removed."""
        discard = getattr(self._f, "discard", None)
        if discard is not None:
            discard()
            return
        try:
            self._f.close()
        finally:
            try:
                self.fs.rm(self.path)
            except FileNotFoundError:
                pass


class ShardWriter:
    """Write samples into shards named by `pattern` (``"flux://b/train/shard-{:06d}.tar"``).

    A shard is closed, and the next one started, before a sample that would take it past
    `max_size` bytes or `max_samples` samples (a single sample larger than `max_size` gets a shard
    of its own). Use as a context manager: on an exception the shard being written is aborted
    (nothing of it appears) and earlier shards stay. `shards` lists the URLs written; `indexes`
    their `ShardIndex`es.
    """

    def __init__(self, pattern: str, max_size: int = DEFAULT_MAX_SIZE, max_samples: int = DEFAULT_MAX_SAMPLES,
                 *, start_shard: int = 0, index: bool = True, storage_options: Optional[dict] = None,
                 **options: Any):
        try:
            first, second = pattern.format(start_shard), pattern.format(start_shard + 1)
        except (IndexError, KeyError, ValueError) as exc:
            raise ValueError(f"shard pattern {pattern!r} needs one numbered field such as {{:06d}} ({exc})") from None
        if first == second:
            raise ValueError(f"shard pattern {pattern!r} has no field for the shard number, such as {{:06d}}")
        if max_size < 1 or max_samples < 1:
            raise ValueError(f"max_size and max_samples must be >= 1, not {max_size} and {max_samples}")
        self.pattern, self.max_size, self.max_samples = pattern, int(max_size), int(max_samples)
        self.next_shard, self.index = int(start_shard), bool(index)
        so = merge_storage_options(type(self).__name__, storage_options, options)
        self.handle = FilesystemHandle.from_url(first, so, default="file")  # a path without a protocol is local
        self.fs = self.handle.fs
        self.shards: list[str] = []
        self.indexes: list[ShardIndex] = []
        self._current: Optional[ShardFile] = None
        self._last_key: Optional[str] = None
        self._closed = False

    def write(self, sample: dict) -> None:
        """Add one sample (``__key__`` plus one field per extension)."""
        if self._closed:
            raise ValueError(f"ShardWriter({self.pattern!r}) is closed")
        members = sample_members(sample)
        span = sum(member_span(name, len(data)) for name, data in members)
        cur = self._current
        if cur is not None and starts_new_shard(cur.size, cur.samples, span, self.max_size, self.max_samples):
            self._finish()
            cur = None
        key = sample["__key__"]
        if cur is not None and key == self._last_key:
            raise ValueError(f"sample key {key!r} repeats the previous sample's: readers would merge the two")
        if cur is None:
            cur = self._current = self._open_next()
        for name, data in members:
            cur.add(name, data)
        cur.samples += 1
        self._last_key = key

    def write_all(self, samples: Iterable[dict]) -> None:
        for sample in samples:
            self.write(sample)

    def _open_next(self) -> ShardFile:
        url = self.pattern.format(self.next_shard)
        self.next_shard += 1
        path = self.fs._strip_protocol(url)
        return ShardFile(self.fs, path, url, index=self.index)

    def _finish(self) -> None:
        cur, self._current = self._current, None
        if cur is None:
            return
        self.indexes.append(cur.close())
        self.shards.append(cur.url)
        logger.debug("wrote shard %s: %d samples, %d bytes", cur.url, cur.samples, cur.size)

    def close(self) -> list[str]:
        """Finish the last shard; returns every shard URL written."""
        if not self._closed:
            self._closed = True
            self._finish()
        return self.shards

    def abort(self) -> None:
        """Drop the shard being written (nothing of it appears); shards already finished stay."""
        self._closed = True
        cur, self._current = self._current, None
        if cur is not None:
            cur.abort()

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
