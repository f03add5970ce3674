"""Upload strategy of zonal (Rapid) buckets over gRPC: one appendable object, parts appended in order on one
`BidiWriteObject` stream and finalized on close ("wb", "xb", `pipe_file`, `put_file`), or, for "ab", appended
to the live unfinalized object (taken over by its generation) and left appendable (`zonal_append.py`).

The object exists, unfinalized, from the first part on (GCS makes it when the stream opens); readers see a
normal object once it is finalized. A failed or cancelled write deletes the generation it created.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..errors import AppendTakenOver
from ..zonal import grpc_writes
from .strategy import BaseUploader

if TYPE_CHECKING:  # pragma: no cover
    from .parts import PartWriter


class AppendableUploader(BaseUploader):
    """A new appendable object, finalized with the whole write's crc32c (the server checks it)."""

    sequential = True
    whole_writes = True         # a write smaller than one part goes through it too (no HTTP upload on zonal)
    first_part = 2 * 2**20      # the stream opens once this much is written, not a whole part: its round trip
                                # and GCS's intake start with the write, as they do writing straight to the stream
    taken: Any = None           # "ab": the writer that took the unfinalized object over at open
    had = 0                     # "ab": the object's size then
    appending = False
    lost = False                # taken over by another writer: its object, not ours to delete

    def __init__(self, pw: "PartWriter"):
        super().__init__(pw)
        self.writer: Any = None
        self._opening: "asyncio.Future | None" = None

    @classmethod
    def onto(cls, writer: Any) -> type:
        """The strategy of an "ab" write through `writer`, open on the object it appends to."""
        return type("AppendOnto", (cls,), {"taken": writer, "had": int(writer.persisted_size or 0),
                                           "appending": True, "verified": True})

    async def start(self) -> None:
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._open())
        await asyncio.shield(self._opening)

    async def _open(self) -> None:
        if self.appending:
            self.writer = self.taken
            return
        self.writer = await grpc_writes.open_writer(self.client, self.pw.bucket, self.pw.key,
                                                    0 if self.pw.create_only else None, self.pw.fields.resource())

    async def upload_part(self, number: int, data: bytes, crc: int) -> None:
        await self.start()
        await self._append(data, crc=crc)

    async def _append(self, data: bytes, size: int | None = None, crc: int | None = None) -> None:
        """`data` appended; for "ab", a takeover by another writer says how much of the whole handle's append
        persisted (`size`: its length, once known)."""
        try:
            await grpc_writes.append(self.client, self.writer, data, crc)
        except AppendTakenOver as exc:
            self.lost = True  # the object is the other writer's now: the abort must not delete it
            if not self.appending:
                raise AppendTakenOver(f"write of {self.pw.what}: another writer took the unfinished object over "
                                      "(an \"ab\" open or append elsewhere) before it was finalized: this write was "
                                      "abandoned; the object is left to that writer, unfinalized", exc.path, 0) from exc
            done = getattr(exc, "at", self.had) - self.had
            raise AppendTakenOver(
                f"append to {self.pw.what}: another writer took the object over (an \"ab\" open or append "
                "elsewhere) while this append was being written: "
                + (f"the first {done} bytes of this append persisted (the object's bytes {self.had}.."
                   f"{self.had + done}), nothing after them; resend only what follows them" if done else
                   f"none of {'the ' + str(size) if size is not None else 'the'} bytes of this append persisted"),
                exc.path, done) from exc

    async def complete(self, results: list, size: int, crc: int, tail: bytes, tail_crc: int) -> dict:
        await self.start()
        if tail:
            await self._append(tail, size, tail_crc)
        if not self.appending:
            resource = await grpc_writes.finalize(self.client, self.writer, crc)
        else:
            resource = await grpc_writes.close_unfinalized(self.client, self.writer)
            # Every append was confirmed; another writer may have appended after them (the object then holds more).
            if int(resource.get("size", -1)) < self.had + size:
                raise OSError(f"append to {self.pw.what}: the object holds {resource.get('size')} bytes after "
                              f"appending {size} to {self.had} (another writer replaced it?)")
        self.writer = type(self).taken = None  # nothing keeps the finished stream (and its gRPC call) alive
        await self.client.written(f"{self.pw.bucket}/{self.pw.key}")
        return resource

    async def abort(self) -> None:
        if self._opening is not None and not self._opening.done():
            await asyncio.gather(self._opening, return_exceptions=True)
        if self.writer is not None:
            writer, self.writer = self.writer, None
            type(self).taken = None
            await grpc_writes.discard(self.client, writer, delete=not self.appending and not self.lost)
