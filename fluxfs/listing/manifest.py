"""Manifests: a listing saved as text, so a training job can skip listing and pin object versions.

Two forms are read (one may even mix them, line by line):

- JSON lines, what `write_manifest` writes: one object per line,
  ``{"name": "bucket/key", "size": 123, "generation": "1700000000000000", "crc32c": "AAAAAA=="}``.
  ``name`` is the full ``bucket/key`` path (no protocol) so a manifest is self-contained and
  can be read without knowing where it came from; an optional ``"label"`` is kept.
- plain text ``key<TAB>label`` (the osstorchconnector form): `key` is a ``bucket/key`` path,
  or relative to `base` when one is given; the label is optional.

Blank lines and lines starting with ``#`` are skipped. A bad line raises ValueError naming
the manifest and the line number.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import tempfile
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from .. import jsontext

if TYPE_CHECKING:  # pragma: no cover
    from fsspec import AbstractFileSystem

_PROTOCOLS = ("flux://", "gs://", "gcs://")


@dataclasses.dataclass(frozen=True)
class ManifestEntry:
    """One object of a manifest. `name` is ``bucket/key``; the rest is None where the line gives none."""

    name: str
    size: int | None = None
    generation: str | None = None
    crc32c: str | None = None
    label: Any = None

    def info(self) -> dict:
        """As a gcsfs-shaped info dict (keys with None values left out)."""
        out = {"name": self.name, "type": "file"}
        for k in ("size", "generation", "crc32c", "label"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        return out


def manifest_line(info: dict) -> str:
    """The JSON line for one info dict (gcsfs shape)."""
    return json.dumps(
        {"name": info["name"], "size": int(info.get("size", 0)), "generation": info.get("generation"),
         "crc32c": info.get("crc32c")},
        ensure_ascii=False, separators=(",", ":"),
    ) + "\n"


def write_manifest(fs: "AbstractFileSystem", path: str, out: Any, sort: bool = True, progress: Any = None,
                   **kwargs: Any) -> int:
    """List `path` with the parallel lister and write one JSON line per object to `out`; return the count.

    `out` is a local path (written to a temporary file, then renamed into place, so a failed
    listing never leaves a truncated manifest), a file object (text or binary), or a URL
    (``flux://`` goes through `fs`; other protocols through fsspec). kwargs go to `iter_objects`.
    """
    batches = fs.iter_objects(path, sort=sort, progress=progress, **kwargs)
    if hasattr(out, "write"):
        return _write_lines(batches, out)
    out = os.fspath(out)
    if "://" in out:
        if out.startswith("flux://"):
            with fs.open(out, "wb") as f:
                return _write_lines(batches, f)
        import fsspec

        with fsspec.open(out, "wb") as f:
            return _write_lines(batches, f)
    directory = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            count = _write_lines(batches, f)
        os.replace(tmp, out)
        return count
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_lines(batches: Iterable[list[dict]], f: Any) -> int:
    text = isinstance(f, io.TextIOBase) or "b" not in getattr(f, "mode", "b")
    count = 0
    try:
        for batch in batches:
            chunk = "".join(manifest_line(info) for info in batch)
            f.write(chunk if text else chunk.encode("utf-8"))
            count += len(batch)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
    return count


def _strip(name: str) -> str:
    for p in _PROTOCOLS:
        if name.startswith(p):
            return name[len(p):]
    return name


def _join(base: str | None, key: str) -> str:
    key = _strip(key)
    if base is None:
        return key
    return _strip(base).rstrip("/") + "/" + key.lstrip("/")


def parse_line(line: str, *, base: str | None = None, where: str = "manifest", lineno: int = 0) -> ManifestEntry | None:
    """One manifest line (either form) -> an entry, or None for a blank/comment line."""
    s = line.rstrip("\r\n")
    if not s.strip() or s.lstrip().startswith("#"):
        return None

    def bad(why: str) -> ValueError:
        shown = s if len(s) <= 200 else s[:200] + "..."
        return ValueError(f"{where}, line {lineno}: {why}: {shown!r}")

    if s.lstrip()[:1] in ("{", "["):
        try:
            obj = jsontext.loads(s)
        except ValueError as exc:
            raise bad(f"invalid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise bad("a JSON manifest line must be an object")
        name = obj.get("name")
        if not isinstance(name, str) or not _strip(name).strip("/"):
            raise bad('missing or empty "name" (expected "bucket/key")')
        size = obj.get("size")
        if size is not None:
            try:
                size = int(size)
            except (TypeError, ValueError):
                raise bad('"size" must be an integer') from None
            if size < 0 or isinstance(obj.get("size"), bool):
                raise bad('"size" must be a non-negative integer')
        generation = obj.get("generation")
        if generation is not None:
            if not isinstance(generation, (str, int)) or isinstance(generation, bool):
                raise bad('"generation" must be a string or integer')
            generation = str(generation)
        crc32c = obj.get("crc32c")
        if crc32c is not None and not isinstance(crc32c, str):
            raise bad('"crc32c" must be a base64 string')
        return ManifestEntry(_join(base, name), size, generation, crc32c, obj.get("label"))
    key, tab, label = s.partition("\t")
    if not key.strip():
        raise bad("empty key before the tab")
    if "\t" in label:
        raise bad("more than one tab (expected key<TAB>label)")
    name = _join(base, key)
    if base is None and "/" not in name.strip("/"):
        raise bad("key has no bucket (expected bucket/key, or pass base=)")
    return ManifestEntry(name, label=label if tab else None)


def iter_manifest(source: Any, *, fs: Any = None, base: str | None = None) -> Iterator[ManifestEntry]:
    """Entries of a manifest, lazily. `source`: a local path, a URL, or an open file object.

    With `fs` (any fsspec filesystem) a path is opened through it; a URL without `fs` goes
    through fsspec; otherwise `source` is a local file.
    """
    if hasattr(source, "read"):
        yield from _iter_lines(source, getattr(source, "name", "manifest"), base)
        return
    where = os.fspath(source)
    if fs is not None:
        opener = fs.open(where, "rb")
    elif "://" in where:
        import fsspec

        opener = fsspec.open(where, "rb")
    else:
        opener = open(where, "rb")
    with opener as f:
        yield from _iter_lines(f, where, base)


def _iter_lines(f: Any, where: str, base: str | None) -> Iterator[ManifestEntry]:
    for lineno, raw in enumerate(f, 1):
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{where}, line {lineno}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
        entry = parse_line(raw, base=base, where=str(where), lineno=lineno)
        if entry is not None:
            yield entry


def read_manifest(source: Any, *, fs: Any = None, base: str | None = None) -> list[ManifestEntry]:
    """All entries of a manifest (JSON lines or key<TAB>label), in file order. See `iter_manifest`."""
    return list(iter_manifest(source, fs=fs, base=base))
