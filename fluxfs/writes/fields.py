"""What a write stores besides its bytes: content type, custom metadata, gcsfs's ``fixed_key_metadata``
and the KMS key; validated once (a bad value names its option) and rendered for each API.

gcsfs's write options map as gcsfs maps them (``gcsfs.core.initiate_upload`` / ``simple_upload``):
``content_type`` -> ``contentType`` (guessed from the key with `mimetypes` when not given),
``metadata`` -> ``metadata``, ``fixed_key_metadata`` (snake_case keys) -> ``contentEncoding``,
``cacheControl``, ``contentDisposition``, ``contentLanguage``, ``customTime``, ``kms_key_name`` -> the
``kmsKeyName`` query parameter. The XML API takes the same as headers (`xml_headers`).
"""
from __future__ import annotations

import mimetypes
import re
from dataclasses import dataclass, field
from typing import Any

from .bodies import DEFAULT_CONTENT_TYPE

#: gcsfs's ``fixed_key_metadata`` keys -> JSON resource fields (gcsfs.core.SUPPORTED_FIXED_KEY_METADATA).
FIXED_KEYS = {
    "content_encoding": "contentEncoding",
    "cache_control": "cacheControl",
    "content_disposition": "contentDisposition",
    "content_language": "contentLanguage",
    "custom_time": "customTime",
}
_XML_HEADERS = {
    "contentEncoding": "Content-Encoding",
    "cacheControl": "Cache-Control",
    "contentDisposition": "Content-Disposition",
    "contentLanguage": "Content-Language",
    "customTime": "x-goog-custom-time",
}
# What an HTTP header carries unchanged: a lower-case token as the x-goog-meta- name (HTTP/2 lower-cases
# header names), printable ASCII as the value.
_HEADER_KEY = re.compile(r"[a-z0-9!#$%&'*+.^_`|~-]+")
_HEADER_VALUE = re.compile(r"[\x20-\x7e]*")


@dataclass(frozen=True)
class ObjectFields:
    """The writable fields of one object being written (immutable; replaced whole when a handle's change)."""

    content_type: str = DEFAULT_CONTENT_TYPE
    metadata: dict[str, str] | None = None
    fixed: dict[str, str] = field(default_factory=dict)  # JSON resource names (contentEncoding, ...)
    kms_key_name: str | None = None

    def resource(self, name: str | None = None) -> dict[str, Any]:
        """The JSON object resource to send (uploads, resumable sessions, compose destinations)."""
        r: dict[str, Any] = {"name": name} if name is not None else {}
        r["contentType"] = self.content_type
        if self.metadata:
            r["metadata"] = dict(self.metadata)
        r.update(self.fixed)
        return r

    def params(self) -> dict[str, str]:
        """Query parameters of the JSON API request that creates the object."""
        return {"kmsKeyName": self.kms_key_name} if self.kms_key_name else {}

    def xml_headers(self) -> dict[str, str]:
        """Headers of the XML multipart initiate carrying every field."""
        h = {"Content-Type": self.content_type}
        for k, v in self.fixed.items():
            h[_XML_HEADERS[k]] = v
        for k, v in (self.metadata or {}).items():
            h[f"x-goog-meta-{k}"] = v
        if self.kms_key_name:
            h["x-goog-encryption-kms-key-name"] = self.kms_key_name
        return h

    @property
    def xml_safe(self) -> bool:
        """True when XML headers carry every field unchanged (else the write uses a JSON API strategy)."""
        values = [self.content_type, *self.fixed.values(), *(self.metadata or {}).values(), self.kms_key_name or ""]
        return (all(_HEADER_KEY.fullmatch(k) for k in self.metadata or {})
                and all(_HEADER_VALUE.fullmatch(v) for v in values))


def object_fields(key: str, content_type: str | None = None, metadata: Any = None, fixed_key_metadata: Any = None,
                  kms_key_name: Any = None, guess_from: str | None = None) -> ObjectFields:
    """Validated fields of a write to `key`; the content type is guessed from `guess_from` (default the key)."""
    if content_type is not None and not isinstance(content_type, str):
        raise TypeError(f"content_type must be a string, not {type(content_type).__name__}")
    if not content_type:
        content_type = mimetypes.guess_type(guess_from or key)[0] or DEFAULT_CONTENT_TYPE
    return ObjectFields(content_type, check_metadata(metadata), _fixed(fixed_key_metadata), _kms(kms_key_name))


def check_metadata(metadata: Any) -> dict[str, str] | None:
    """Custom metadata as {str: str} (values converted with str(), as the JSON API stores them)."""
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise TypeError(f"metadata must be a dict of strings, not {type(metadata).__name__}")
    out = {}
    for k, v in metadata.items():
        if not isinstance(k, str) or not k:
            raise ValueError(f"metadata keys must be non-empty strings, not {k!r}")
        if v is not None:
            out[k] = v if isinstance(v, str) else str(v)
    return out or None


def _fixed(fixed: Any) -> dict[str, str]:
    if not fixed:
        return {}
    if not isinstance(fixed, dict):
        raise TypeError(f"fixed_key_metadata must be a dict, not {type(fixed).__name__}")
    out = {}
    json_names = {v: v for v in FIXED_KEYS.values()}
    for k, v in fixed.items():
        name = FIXED_KEYS.get(k) or json_names.get(k)
        if name is None:
            raise ValueError(f"fixed_key_metadata: unsupported key {k!r}; supported: {', '.join(FIXED_KEYS)}")
        if v is None:
            continue
        if hasattr(v, "isoformat") and name == "customTime":
            v = v.isoformat().replace("+00:00", "Z")
        if not isinstance(v, str):
            raise TypeError(f"fixed_key_metadata[{k!r}] must be a string, not {type(v).__name__}")
        out[name] = v
    return out


def _kms(kms_key_name: Any) -> str | None:
    if kms_key_name is None or kms_key_name == "":
        return None
    if not isinstance(kms_key_name, str):
        raise TypeError(f"kms_key_name must be a string, not {type(kms_key_name).__name__}")
    return kms_key_name
