"""Upload strategy "xml": GCS's XML multipart upload API (initiate, PUT parts, complete, abort).

Parts go up in parallel and become visible only on completion, which is what makes writes
atomic. GCS requires every part but the last to be at least 5 MiB, and at most 10,000 parts.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from ..errors import PreconditionFailed, UploadLost, raise_for_status
from ..gcs import http
from ..gcs import xml as gcsxml
from ..gcs.limits import XML_MAX_PARTS
from ..gcs.checksums import crc_to_b64
from .. import temp_registry, temp_uploads
from ..temp_uploads import list_incomplete_uploads
from .bodies import body
from .fields import ObjectFields
from .single import confirm_written, exists_error, get_resource, upload_single
from .strategy import BaseUploader

if TYPE_CHECKING:  # pragma: no cover
    from .parts import PartWriter

from ..gcs.redact import get_logger

logger = get_logger(__name__)  # records redacted: no credentials in logs



class XmlUploader(BaseUploader):
    """One XML multipart upload; its id exists from `start` until `complete` or `abort`."""

    max_parts = XML_MAX_PARTS  # part sizes grow to stay under it (writes/schedule.py); tests lower both

    def __init__(self, pw: "PartWriter"):
        super().__init__(pw)
        self.url = pw.client.xml_url(pw.bucket, pw.key)
        self.upload_id: str | None = None
        # Set by `start`: when our initiate request was sent and answered, and whether it was retried.
        self._initiate_window = (0.0, 0.0)
        self._retried_initiate = False
        # The upload's record ("bucket/key", generation): how cleanup tells fluxfs's uploads from others'.
        self.record: tuple[str, str] | None = None

    def _precondition(self) -> dict[str, str]:
        # Create-only: GCS checks x-goog-if-generation-match when the upload completes.
        return {"x-goog-if-generation-match": "0"} if self.pw.create_only else {}

    async def start(self) -> None:
        headers = {**self.pw.fields.xml_headers(), **self._precondition()}
        self._initiate_window = (time.time(), time.time())

        async def attempt(n: int) -> http.Response:
            # A retried initiate whose first answer was lost has created an upload we never heard of:
            # remember to look for it once ours is finished (see `sweep_orphans`).
            self._retried_initiate = n > 0
            return await http.request_once(self.client, "POST", self.url, what=self.pw.what,
                                           params={"uploads": ""}, headers=headers)

        resp = await self.client.retry_policy("write").run(attempt, what=f"initiate {self.pw.what}")
        self.upload_id = gcsxml.find_text(resp.body, "UploadId")
        if not self.upload_id:
            raise OSError(f"initiating the multipart upload of {self.pw.what} returned no UploadId")
        self._initiate_window = (self._initiate_window[0], time.time())
        await self._mark()

    async def _mark(self) -> None:
        """Create the upload's record (`temp_uploads`), so that `fluxfs cleanup` may abort this upload if
        the process dies; without one (refused, say) the write goes on and cleanup only reports it."""
        key = temp_uploads.record_key(self.client)
        try:
            resource = await upload_single(
                self.client, self.pw.bucket, key, b"", 0, create_only=True, what=self.pw.what,
                fields=ObjectFields(metadata=temp_uploads.record_metadata(self.client, self.pw.key, self.upload_id)))
        except OSError as exc:
            logger.warning("could not record the multipart upload of %s as fluxfs's (cleanup will report it, "
                           "not abort it): %s", self.pw.what, exc)
            return
        self.record = (f"{self.pw.bucket}/{key}", str(resource.get("generation")))

    async def _unmark(self) -> None:
        """Delete the record once the upload is completed or aborted (a failure leaves it to cleanup)."""
        record, self.record = self.record, None
        if record is not None:
            await temp_registry.delete(self.client, *record)

    async def sweep_orphans(self, own_id: str | None) -> None:
        """Abort uploads of our key that a lost initiate answer left behind.

        Only uploads started inside our own initiate window and still without parts qualify, so a
        concurrent writer's upload (which would have parts by now) is left alone.
        """
        if not self._retried_initiate:
            return
        self._retried_initiate = False
        first, last = self._initiate_window
        margin = 2.0  # the server's clock and ours: the same host here, close on GCS
        try:
            for up in await list_incomplete_uploads(self.client, self.pw.bucket, self.pw.key):
                if up["key"] != self.pw.key or up["upload_id"] == own_id or up["initiated"] is None:
                    continue
                if not first - margin <= up["initiated"] <= last + margin:
                    continue
                parts = await http.request(self.client, "GET", self.url, op="list", what=self.pw.what,
                                           params={"uploadId": up["upload_id"]})
                if gcsxml.find_text(parts.body, "PartNumber") is None:
                    await http.request(self.client, "DELETE", self.url, op="delete", what=self.pw.what,
                                       params={"uploadId": up["upload_id"]}, ok=(200, 204, 404))
        except (OSError, gcsxml.ParseError) as exc:  # best effort: `fluxfs cleanup` removes what is left
            logger.warning("could not sweep orphaned multipart uploads of %s: %s", self.pw.what, exc)

    async def upload_part(self, number: int, data: bytes, crc: int) -> str:
        if number > self.max_parts:
            raise ValueError(f"{self.pw.what}: more than {self.max_parts} parts, the most an XML multipart upload "
                             f"takes: the object is larger than GCS's {self.max_object_size}-byte limit")
        # The crc32c lets the server reject a part corrupted on the way (400 BadDigest).
        what = f"{self.pw.what} part {number}"
        resp = await http.request(self.client, "PUT", self.url, op="write", what=what,
                                  params={"partNumber": str(number), "uploadId": self.upload_id},
                                  headers={"x-goog-hash": f"crc32c={crc_to_b64(crc)}"}, data=body(data),
                                  ok=(200, 404))
        if resp.status == 404:
            self._raise_lost(resp, what)
        return resp.headers.get("ETag", "")

    def _raise_lost(self, resp: http.Response, what: str) -> None:
        """UploadLost for GCS's NoSuchUpload (our upload is gone), else the 404 as usual (no bucket)."""
        try:
            code = gcsxml.find_text(resp.body, "Code")
        except gcsxml.ParseError:
            code = None
        if code == "NoSuchUpload":
            self.upload_id = None  # nothing left to abort
            raise UploadLost(f"{self.pw.what}: the multipart upload was aborted or lost on the server (a server "
                             f"restart, or `fluxfs cleanup` / abort_incomplete_uploads elsewhere); nothing was "
                             f"written")
        raise_for_status(404, resp.body, what, resp.headers)

    async def complete(self, results: list, size: int, crc: int, tail: bytes, tail_crc: int) -> dict:
        manifest = "<CompleteMultipartUpload>" + "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{escape(etag)}</ETag></Part>"
            for n, etag in enumerate(results, 1)
        ) + "</CompleteMultipartUpload>"
        what = self.pw.what

        async def attempt(n: int) -> dict:
            try:
                resp = await http.request_once(self.client, "POST", self.url, what=what,
                                               params={"uploadId": self.upload_id},
                                               headers={"Content-Type": "application/xml", **self._precondition()},
                                               data=manifest.encode(), ok=(200, 404))
                if resp.status == 404:
                    self._raise_lost(resp, what)
            except (FileNotFoundError, PreconditionFailed, UploadLost) as exc:
                # A retry after a lost answer finds the upload gone (404) or the object present (412).
                if n > 0:
                    found = await confirm_written(self.client, self.pw.bucket, self.pw.key, crc, size)
                    if found is not None:
                        return found
                if isinstance(exc, PreconditionFailed):
                    raise exists_error(self.pw.bucket, self.pw.key) from None
                raise
            self.upload_id = None  # completed: nothing left to abort
            generation = resp.headers.get("x-goog-generation")
            try:
                return await get_resource(self.client, self.pw.bucket, self.pw.key, generation)
            except FileNotFoundError:
                if not generation:
                    raise
                # Already replaced by a later writer (no versioning): what the completion said must do.
                return {"bucket": self.pw.bucket, "name": self.pw.key, "generation": generation, "size": str(size),
                        "crc32c": http.goog_hash(resp.headers, "crc32c")}

        own_id = self.upload_id
        resource = await self.client.retry_policy("write").run(attempt, what=f"complete {what}")
        self.upload_id = None
        await self._unmark()
        await self.sweep_orphans(own_id)
        return resource

    async def abort(self) -> None:
        own_id = self.upload_id
        if own_id is not None:
            try:
                await http.request(self.client, "DELETE", self.url, op="delete", what=self.pw.what,
                                   params={"uploadId": own_id}, ok=(200, 204))
            except FileNotFoundError:
                pass
            self.upload_id = None
        await self._unmark()
        await self.sweep_orphans(own_id)
