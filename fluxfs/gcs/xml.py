"""Reading GCS's XML API answers: namespace-free tag names, one field's text, an element's fields.

Shared by the XML multipart upload strategy (`fluxfs.writes.xml`) and the cleanup of
unfinished uploads (`fluxfs.temporaries`), so neither imports the other for parsing.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

ParseError = ET.ParseError


def local(tag: str) -> str:
    """An element's tag without its XML namespace ("{ns}UploadId" -> "UploadId")."""
    return tag.rsplit("}", 1)[-1]


def find_text(body: bytes, name: str) -> str | None:
    """The stripped text of the first element named `name` anywhere in `body`, or None."""
    for el in ET.fromstring(body).iter():
        if local(el.tag) == name:
            return (el.text or "").strip()
    return None


def children(body: bytes) -> list[ET.Element]:
    """The top-level elements of an XML document (e.g. a listing's <Upload> entries)."""
    return list(ET.fromstring(body))


def fields(el: ET.Element) -> dict[str, str]:
    """An element's children as {local tag: stripped text}."""
    return {local(c.tag): (c.text or "").strip() for c in el}

