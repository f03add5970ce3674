"""What pipes knows about one object: `ObjectMeta` for transforms, and `ObjectTable`, a resolved object list."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from ..urls import DEFAULT_PROTOCOL, parse_url


@dataclass(frozen=True)
class ObjectMeta:
    """What a transform learns about an object besides its bytes."""

    key: str
    size: int
    label: Any = None
    bucket: str = ""
    generation: Optional[str] = None
    crc32c: Optional[str] = None
    protocol: str = DEFAULT_PROTOCOL

    @property
    def path(self) -> str:
        """``bucket/key``, as fsspec paths are spelled."""
        return f"{self.bucket}/{self.key}"

    @property
    def url(self) -> str:
        return f"{self.protocol}://{self.path}"


Transform = Callable[[bytes, ObjectMeta], Any]


def key_and_bytes(data: bytes, meta: ObjectMeta) -> tuple[str, bytes]:
    """The default transform: ``(key, data)``, which DataLoader's default collate turns into two lists."""
    return meta.key, data


def meta_from_info(info: dict, data: bytes, protocol: str) -> ObjectMeta:
    """The `ObjectMeta` of an info dict (name "bucket/key", size, generation, crc32c, label); size defaults to the
    bytes read."""
    _, bucket, key = parse_url(info["name"])
    return ObjectMeta(key, int(info.get("size", len(data))), info.get("label"), bucket,
                      _opt_str(info.get("generation")), info.get("crc32c"), protocol)


class ObjectTable:
    """The resolved objects as parallel columns: cheap to pickle to spawned workers, no per-object dicts."""

    def __init__(self, names: list[str], sizes: list[int], generations: list[Optional[str]],
                 crc32cs: list[Optional[str]], labels: Optional[list[Any]] = None):
        self.names, self.sizes, self.generations, self.crc32cs = names, sizes, generations, crc32cs
        self.labels = labels

    @classmethod
    def from_infos(cls, infos: Iterable[dict], labels: Optional[dict[str, Any]] = None) -> "ObjectTable":
        """From info dicts (name "bucket/key", size, generation, crc32c), sorted by name so every process agrees."""
        rows = sorted(infos, key=lambda info: info["name"])
        names = [r["name"] for r in rows]
        return cls(
            names,
            [int(r.get("size") or 0) for r in rows],
            [_opt_str(r.get("generation")) for r in rows],
            [r.get("crc32c") for r in rows],
            [labels.get(n) for n in names] if labels else None,
        )

    def __len__(self) -> int:
        return len(self.names)

    def info(self, i: int) -> dict:
        """The info dict of object `i`, as `fs.cat_objects` takes it."""
        info = {"name": self.names[i], "size": self.sizes[i], "type": "file"}
        if self.generations[i] is not None:
            info["generation"] = self.generations[i]
        if self.crc32cs[i] is not None:
            info["crc32c"] = self.crc32cs[i]
        return info

    def meta(self, i: int, protocol: str) -> ObjectMeta:
        _, bucket, key = parse_url(self.names[i])
        label = self.labels[i] if self.labels is not None else None
        return ObjectMeta(key, self.sizes[i], label, bucket, self.generations[i], self.crc32cs[i], protocol)


def _opt_str(value: Any) -> Optional[str]:
    return None if value is None else str(value)
