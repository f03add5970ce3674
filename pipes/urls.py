"""The one parser of object URLs in pipes: ``protocol://bucket/key`` (or a bare ``bucket/key``) into its parts.

It lives in fluxfs (public as `fluxfs.support`), which the `fluxfs` command shares without importing pipes (torch).
"""
from fluxfs.support import DEFAULT_PROTOCOL, OBJECT_PROTOCOLS, ObjectURL, parse_url, url_protocol

__all__ = ["DEFAULT_PROTOCOL", "OBJECT_PROTOCOLS", "ObjectURL", "parse_url", "url_protocol"]
