"""Strategy "xml" on servers without XML multipart upload: fall back to "compose", once per filesystem.

Some GCS-compatible servers (fake-gcs-server, several emulators) have the JSON API but no XML
multipart upload, and answer its initiate with 501, 405, 404 or 400. The first write that meets
such an answer goes on as a compose upload (parts as temporary objects), the filesystem remembers
it and warns once, and later writes of that filesystem start as compose uploads
(`settings.upload_settings`); on a zonal bucket, which has no compose, that write fails naming it and
later ones go as one resumable session.
"""
from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Any

from ..errors import HttpError, ZonalUnsupported
from ..gcs import http
from ..zonal import transport
from .compose import ComposeUploader
from .strategy import Uploader
from .xml import XmlUploader

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client
    from .parts import PartWriter

logger = logging.getLogger(__name__)

#: Answers to an XML multipart initiate that mean "not implemented here".
UNSUPPORTED = (400, 404, 405, 501)


def xml_unsupported(client: "Client") -> bool:
    """Whether this filesystem's server has been found to lack XML multipart upload."""
    return client.refused.xml_multipart_unsupported


def _mark_unsupported(client: "Client", exc: BaseException) -> None:
    if not xml_unsupported(client):
        client.refused.xml_multipart_unsupported = True
        warnings.warn(f"fluxfs: the server does not support XML multipart upload ({exc}); this filesystem writes "
                      "with multipart='compose' from now on", RuntimeWarning, stacklevel=2)


def _status(exc: BaseException) -> int | None:
    if isinstance(exc, FileNotFoundError):
        return 404
    if isinstance(exc, HttpError):
        return exc.status
    return None


async def _bucket_exists(client: "Client", bucket: str) -> bool:
    """A 404 to the initiate means "no XML multipart" only when the bucket itself is there."""
    try:
        await http.request(client, "GET", client.json_url("b/{}", bucket), op="metadata", what=bucket,
                           params={"fields": "name"})
    except FileNotFoundError:
        return False
    return True


class XmlOrComposeUploader(XmlUploader):
    """An XML multipart upload that becomes a compose upload when the server refuses the initiate."""

    def __init__(self, pw: "PartWriter"):
        super().__init__(pw)
        self._instead: Uploader | None = None

    @property
    def drain_on_abort(self) -> bool:  # type: ignore[override]
        return self._instead.drain_on_abort if self._instead is not None else XmlUploader.drain_on_abort

    async def start(self) -> None:
        try:
            await super().start()
        except Exception as exc:  # anything but "unsupported" is re-raised as it was
            if _status(exc) not in UNSUPPORTED or (_status(exc) == 404 and not await _bucket_exists(
                    self.client, self.pw.bucket)):
                raise
            _mark_unsupported(self.client, exc)
            if not (await transport.of(self.client, self.pw.bucket)).compose:  # nothing to fall back on
                raise ZonalUnsupported(
                    f"{self.pw.what}: the server has no XML multipart upload and bucket {self.pw.bucket} is zonal "
                    "(Rapid), where GCS has no compose; write it again: this filesystem now writes there with "
                    "one resumable session") from exc
            logger.info("writing %s as a compose upload: %s", self.pw.what, exc)
            self._instead = ComposeUploader(self.pw)
            self.max_parts = self._instead.max_parts  # the parts still to come grow under compose's cap
            self.cap_setting = self._instead.cap_setting
            await self._instead.start()

    async def upload_part(self, number: int, data: bytes, crc: int) -> Any:
        if self._instead is not None:
            cap = self._instead.max_parts
            if cap is not None and number > cap and self.pw.size <= self.max_object_size:
                # Parts of a known-size upload were cut for XML's 10,000 before the fallback was known.
                raise ValueError(f"{self.pw.what}: the server has no XML multipart upload, and the compose upload "
                                 f"this write fell back to takes at most {cap} parts, fewer than it was cut into; "
                                 "write it again: this filesystem now cuts its writes for compose")
            return await self._instead.upload_part(number, data, crc)
        return await super().upload_part(number, data, crc)

    async def complete(self, results: list, size: int, crc: int, tail: bytes, tail_crc: int) -> dict:
        if self._instead is not None:
            return await self._instead.complete(results, size, crc, tail, tail_crc)
        return await super().complete(results, size, crc, tail, tail_crc)

    async def abort(self) -> None:
        if self._instead is not None:
            return await self._instead.abort()
        return await super().abort()
