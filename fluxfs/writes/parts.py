"""The async core of fluxfs uploads: parts go up concurrently under a bound, then one completion step.

`PartWriter` is shared by the three upload strategies (XML multipart, compose, resumable):
a strategy only knows how to start, send one part, complete and abort; the pipeline owns
ordering, back-pressure, the running crc32c of everything written, verification of the
final object and the guarantee that a failure leaves nothing visible behind.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable

from ..errors import ChecksumMismatch
from ..gcs.checksums import crc32c, crc32c_combine
from .fields import ObjectFields
from .single import check_crc, confirm_written, delete_object, object_info, upload_single
from .strategy import Uploader

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

from ..gcs.redact import get_logger

logger = get_logger(__name__)  # records redacted: no credentials in logs


START_GRACE_S = 5.0  # how long an abort waits for an upload start still in flight


class PartWriter:
    """Uploads numbered parts concurrently (at most `concurrency` in flight), then completes atomically.

    `add_part` returns once the part is in flight, waiting for room first: that wait is the
    back-pressure that bounds memory. Parts in flight hold at most `in_flight_limit` bytes: concurrency x
    the first part's size, and never more than write_memory minus its largest part (half of it: the part
    the caller fills meanwhile); a part larger than that room (parts grow with the write, `schedule.py`)
    goes alone. So parts in flight plus the one being filled stay within the write_memory budget.
    """

    def __init__(self, client: "Client", bucket: str, key: str,
                 make_uploader: Callable[["PartWriter"], Uploader], *, concurrency: int,
                 create_only: bool, fields: ObjectFields):
        self.client, self.bucket, self.key = client, bucket, key
        self._make_uploader = make_uploader
        self.concurrency = concurrency
        self.create_only = create_only
        #: what the object stores besides its bytes; a handle may replace it until the upload starts
        self.fields = fields
        self._uploader: Uploader | None = None
        self._started: asyncio.Future | None = None
        self._freed: asyncio.Event | None = None  # set whenever a part in flight finishes
        self.in_flight_limit = 0   # bytes parts in flight may hold, set by the first part
        self.in_flight = 0         # bytes of parts in flight now
        self.peak_in_flight = 0    # the most they ever held (tests check the budget with it)
        self._running = 0          # parts in flight now
        self.largest_part = 0
        self._tasks: dict[int, asyncio.Task] = {}
        self._results: dict[int, Any] = {}
        self._error: BaseException | None = None
        self._aborted = False
        self._completing = False  # the completion request may have reached the server
        self.size = 0
        self.crc = 0
        self.parts = 0
        self.info: dict | None = None
        self._tail: tuple[bytes, int] = (b"", 0)

    @property
    def what(self) -> str:
        return f"{self.bucket}/{self.key}"

    @property
    def started(self) -> bool:
        """True once the strategy started (the object's fields were sent or are being sent)."""
        return self._uploader is not None

    @property
    def fields_at_complete(self) -> bool:
        """True when the strategy sends the object's fields only when completing."""
        return bool(getattr(self._make_uploader, "fields_at_complete", False))

    @property
    def max_parts(self) -> int | None:
        """The part cap in force: the running strategy's (a fallback may lower it), else the chosen one's."""
        if self._uploader is not None:
            return self._uploader.max_parts
        return self._make_uploader.part_cap(self.client)

    @property
    def cap_setting(self) -> str | None:
        """The option that sets `max_parts`, if any (compose_max_components)."""
        return getattr(self._uploader or self._make_uploader, "cap_setting", None)

    @property
    def aborted(self) -> bool:
        return self._aborted

    def _check(self) -> None:
        if self._aborted:
            raise OSError(f"upload of {self.what} was aborted")
        if self._error is not None:
            raise self._error

    async def add_part(self, data: bytes, crc: int | None = None) -> None:
        """Queue one full part (bytes) for upload; raises the first failure of an earlier part."""
        self._check()
        if crc is None:
            crc = crc32c(data)
        if self._uploader is None:
            self._freed = asyncio.Event()
            self._uploader = self._make_uploader(self)
            # Started in the background: the caller fills the next parts meanwhile instead of
            # waiting a round trip (~35 ms on the cloud profile) before the first part can go.
            self._started = asyncio.ensure_future(self._uploader.start())
            memory = self.client.options.write_memory
            self.in_flight_limit = min(self.concurrency * max(1, len(data)), memory - memory // 2)
        size = len(data)
        while self._running and (self._running >= self.concurrency or self.in_flight + size > self.in_flight_limit):
            self._freed.clear()   # one producer: nobody else takes the room freed meanwhile
            await self._freed.wait()
            self._check()
        self._running += 1
        self.in_flight += size
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        self.largest_part = max(self.largest_part, size)
        self.parts += 1
        self.crc = crc32c_combine(self.crc, crc, len(data))
        self.size += len(data)
        n = self.parts
        self._tasks[n] = asyncio.ensure_future(self._run_part(n, data, crc))

    async def _run_part(self, n: int, data: bytes, crc: int) -> None:
        try:
            await asyncio.shield(self._started)  # shielded: one cancelled part must not cancel the start
            self._results[n] = await self._uploader.upload_part(n, data, crc)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # kept for the writer; the task itself ends quietly
            if self._error is None:
                self._error = exc
        finally:
            self._running -= 1
            self.in_flight -= len(data)
            self._freed.set()

    async def finish(self, tail: bytes, tail_crc: int | None = None, commit: bool = True) -> dict | None:
        """Upload what is left, wait for every part, and (if `commit`) complete and verify the object."""
        self._check()
        if tail_crc is None:
            tail_crc = crc32c(tail)
        if self._uploader is None and getattr(self._make_uploader, "whole_writes", False):
            self._uploader = self._make_uploader(self)  # every write goes through it (zonal: appendable)
            self._started = asyncio.ensure_future(self._uploader.start())
        if self._uploader is None:
            # Smaller than one part: a single request, nothing to assemble.
            self.size, self.crc, self._tail = len(tail), tail_crc, (tail, tail_crc)
        elif tail and not self._uploader.sequential:
            await self.add_part(tail, tail_crc)
            self._tail = (b"", 0)
        else:
            self._tail = (tail, tail_crc)
        if self._tasks:
            await asyncio.gather(*self._tasks.values())
        self._check()
        return await self.commit() if commit else None

    async def commit(self) -> dict:
        """Make the object visible; verify its crc32c against what was written (removing it on mismatch)."""
        self._check()
        tail, tail_crc = self._tail
        if self._uploader is not None:
            self.crc = crc32c_combine(self.crc, tail_crc, len(tail))
            self.size += len(tail)
        try:
            # Set only while a completion request may be in flight: an interrupt (cancellation) then
            # makes `abort` check whether it landed. An error answer means it did not.
            self._completing = True
            if self._uploader is None:
                resource = await upload_single(self.client, self.bucket, self.key, tail, tail_crc,
                                               create_only=self.create_only, fields=self.fields)
            else:
                results = [self._results[n] for n in range(1, self.parts + 1)]
                resource = await self._uploader.complete(results, self.size, self.crc, tail, tail_crc)
        except asyncio.CancelledError:
            raise
        except BaseException:
            self._completing = False
            raise
        self._completing = False
        if self._uploader is not None and not getattr(self._uploader, "verified", False):
            try:
                check_crc(resource, self.crc, self.size, self.what)
            except ChecksumMismatch:
                await delete_object(self.client, self.bucket, self.key, resource.get("generation"))
                raise
        self.info = object_info(self.client, self.bucket, resource)
        return self.info

    async def abort(self) -> None:
        """Cancel parts in flight and remove everything uploaded so far; safe to call more than once."""
        if self._aborted:
            return
        self._aborted = True
        if not getattr(self._uploader, "drain_on_abort", False):
            for t in self._tasks.values():
                t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        if self._started is not None:
            # A start in flight is let finish, so the upload it creates is known and aborted; one still
            # retrying after a few seconds (server unreachable) is cancelled rather than waited for.
            await asyncio.wait({self._started}, timeout=START_GRACE_S)
            self._started.cancel()
            await asyncio.gather(self._started, return_exceptions=True)
        if self._uploader is not None:
            try:
                await self._uploader.abort()
            except Exception as exc:  # the abort must not hide the error that caused it
                logger.warning("could not abort the upload of %s: %s", self.what, exc)
        if self._completing and self.info is None:
            # Interrupted while completing: if the object landed anyway, take it back.
            try:
                found = await confirm_written(self.client, self.bucket, self.key, self.crc, self.size)
                if found is not None:
                    await delete_object(self.client, self.bucket, self.key, found.get("generation"))
            except Exception as exc:
                logger.warning("could not check for a completed upload of %s: %s", self.what, exc)
