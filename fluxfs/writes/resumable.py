"""Upload strategy "resumable" ("off", deprecated): one JSON-API resumable upload, chunks sent one after the other.

The object appears only with the final chunk (sent on close), so it is as atomic as the
parallel strategies, just not parallel. Non-final chunks must be multiples of 256 KiB.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..errors import PreconditionFailed, UploadLost
from ..gcs import http
from ..gcs.checksums import crc_to_b64
from .bodies import body as sliced
from .single import answer_or_confirm, confirm_written, exists_error
from .strategy import BaseUploader

if TYPE_CHECKING:  # pragma: no cover
    from .parts import PartWriter

_RANGE = re.compile(r"bytes=0-(\d+)")
# GCS: 404 for a session that expired or is unknown (cancelled, or a restarted server), 410 for one
# that must be started over; either way the bytes sent so far are gone.
_GONE = (404, 410)


class ResumableUploader(BaseUploader):
    """A resumable session; a failed chunk resumes from what the server says it persisted."""

    sequential = True
    max_parts = None  # one session: no part cap, parts keep their size

    def __init__(self, pw: "PartWriter"):
        super().__init__(pw)
        self.session: str | None = None
        self.offset = 0

    async def start(self) -> None:
        meta = self.pw.fields.resource(self.pw.key)
        params = {"uploadType": "resumable", "name": self.pw.key, **self.pw.fields.params()}
        if self.pw.create_only:
            params["ifGenerationMatch"] = "0"  # checked at initiation and again at finalization
        try:
            resp = await http.request(self.client, "POST", self.client.upload_url(self.pw.bucket), op="write",
                                      what=self.pw.what, params=params, json=meta)
        except PreconditionFailed:
            raise exists_error(self.pw.bucket, self.pw.key) from None
        self.session = resp.headers["Location"]

    def _lost(self) -> UploadLost:
        self.session = None  # nothing left to cancel
        return UploadLost(f"{self.pw.what}: the resumable upload session was cancelled or lost on the server (a "
                          f"server restart, or the session expired); nothing was written")

    async def _persisted(self) -> tuple[int, dict | None]:
        """Ask the session how many bytes it holds (or the object, if it is already finalized)."""
        resp = await http.request_once(self.client, "PUT", self.session, what=self.pw.what,
                                       headers={"Content-Range": "bytes */*"}, ok=(200, 201, 308, *_GONE))
        if resp.status in _GONE:
            raise self._lost()
        if resp.status in (200, 201):
            return -1, resp.json()
        m = _RANGE.match(resp.headers.get("Range", ""))
        return (int(m.group(1)) + 1 if m else 0), None

    async def _send(self, data: bytes, total: int | None, crc: int | None) -> dict | None:
        """Send `data` at self.offset (the final chunk when `total` is given); resume on retries."""
        start, end = self.offset, self.offset + len(data)
        what = self.pw.what

        async def gone() -> dict:
            """The session is gone: finished by our own final chunk (its answer lost, or a resend the
            HTTP client made on its own after a dropped connection found it finalized), or lost."""
            if total is not None:
                found = await confirm_written(self.client, self.pw.bucket, self.pw.key, crc, total)
                if found is not None:
                    self.session = None
                    return found
            raise self._lost()

        async def attempt(n: int) -> dict | None:
            begin = start
            if n > 0:
                try:
                    have, done = await self._persisted()
                except UploadLost:
                    return await gone()
                if done is not None:
                    return done
                if have >= end and total is None:
                    return None
                begin = max(start, have)
            payload = data[begin - start:] if begin > start else data
            size = "*" if total is None else str(total)
            rng = f"bytes {begin}-{end - 1}/{size}" if end > begin else f"bytes */{size}"
            headers = {"Content-Range": rng}
            if total is not None:
                headers["x-goog-hash"] = f"crc32c={crc_to_b64(crc)}"  # the server checks the whole object
            try:
                resp = await http.request_once(self.client, "PUT", self.session, what=what, headers=headers,
                                               data=sliced(payload),
                                               ok=((308,) if total is None else (200, 201)) + _GONE)
            except PreconditionFailed:
                raise exists_error(self.pw.bucket, self.pw.key) from None
            if resp.status in _GONE:
                return await gone()
            if total is None:
                return None
            return await answer_or_confirm(self.client, resp, self.pw.bucket, self.pw.key, crc, total, what)

        result = await self.client.retry_policy("write").run(attempt, what=f"upload {what}")
        self.offset = end
        return result

    async def upload_part(self, number: int, data: bytes, crc: int) -> None:
        await self._send(data, None, None)

    async def complete(self, results: list, size: int, crc: int, tail: bytes, tail_crc: int) -> dict:
        resource = await self._send(tail, size, crc)
        self.session = None
        return resource

    async def abort(self) -> None:
        if self.session is None:
            return
        try:
            await http.request(self.client, "DELETE", self.session, op="delete", what=self.pw.what, ok=(200, 204, 499))
        except FileNotFoundError:
            pass
        self.session = None
