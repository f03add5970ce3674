"""The bucket record (``Bucket``: its sorted index of objects and its JSON resource) and GCS's naming rules."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from sortedcontainers import SortedDict

from .errors import ServerError
from .layout import is_zonal, resource_fields
from .objects import Obj, SynthBatch
from .timestamps import rfc3339

# Bucket names: GCS rules, simplified (3-222 chars of lowercase letters, digits, - _ .).
_BUCKET_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-_.")


@dataclass
class Bucket:
    """One bucket: its settings and its objects, sorted by name."""

    name: str
    created: float = field(default_factory=time.time)
    metageneration: int = 1
    labels: Optional[Dict[str, str]] = None
    versioning: Optional[bool] = None   # None: never set (no "versioning" field), else versioning.enabled
    objects: SortedDict = field(default_factory=SortedDict)  # name -> Obj or SynthBatch
    noncurrent: SortedDict = field(default_factory=SortedDict)  # name -> [Obj], oldest generation first
    layout: Dict[str, Any] = field(default_factory=dict)  # location, storage class, placement, HNS (layout.py)
    folders: SortedDict = field(default_factory=SortedDict)  # HNS folders: "a/b/" -> record (folders.py)

    @property
    def zonal(self) -> bool:
        """A zonal (Rapid) bucket: no compose."""
        return is_zonal(self.layout)

    @property
    def hns(self) -> bool:
        """A hierarchical-namespace bucket: folders are resources (zonal buckets always have one)."""
        return (self.layout.get("hierarchicalNamespace") or {}).get("enabled") is True

    def lookup(self, name: str) -> Optional[Obj]:
        """The live object ``name`` (materialized from its synthetic batch on first use) or None."""
        v = self.objects.get(name)
        if v.__class__ is SynthBatch:
            v = v.obj(name)
            self.objects[name] = v
        return v

    def view(self, name: str) -> Obj:
        """Like lookup, for listing: a synthetic object is built but not kept, so a list page costs
        the same whether or not its objects were touched before."""
        v = self.objects[name]
        return v.view(name) if v.__class__ is SynthBatch else v

    def resource(self, base_url: str) -> Dict[str, Any]:
        r = {"kind": "storage#bucket", "id": self.name, "name": self.name,
             "selfLink": f"{base_url}/storage/v1/b/{self.name}", "projectNumber": "0",
             "metageneration": str(self.metageneration),
             "etag": f"CA{self.metageneration}=", "timeCreated": rfc3339(self.created),
             "updated": rfc3339(self.created), **resource_fields(self.layout)}
        if self.labels:
            r["labels"] = dict(self.labels)
        if self.versioning is not None:
            r["versioning"] = {"enabled": self.versioning}
        return r


def validate_bucket_name(name: str) -> None:
    """400 unless ``name`` follows the bucket naming rules above."""
    if not (3 <= len(name) <= 222) or not set(name) <= _BUCKET_CHARS or name[0] in "-_." or name[-1] in "-_.":
        raise ServerError(400, f"Invalid bucket name: {name!r}")


def validate_object_name(name: str) -> None:
    """400 unless ``name`` is a valid object name (GCS's rules): 1-1024 bytes of UTF-8, not "." or "..",
    no carriage return or line feed, not under ".well-known/acme-challenge/"."""
    if not name:
        raise ServerError(400, "Object name must not be empty.", "required")
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise ServerError(400, "Object names must be valid UTF-8.") from None
    if len(encoded) > 1024:
        raise ServerError(400, "Object name is longer than 1024 bytes.")
    if name in (".", "..") or "\r" in name or "\n" in name or name.startswith(".well-known/acme-challenge/"):
        raise ServerError(400, f"Invalid object name: {name!r}")
