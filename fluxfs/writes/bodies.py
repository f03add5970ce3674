"""Request bodies for uploads: bytes sent in 1 MiB slices instead of handed to aiohttp whole."""
from __future__ import annotations

import aiohttp.payload

DEFAULT_CONTENT_TYPE = "application/octet-stream"

SEND_SLICE = 1 << 20


class SlicedBytes(aiohttp.payload.BytesPayload):
    """A request body sent in 1 MiB slices (reusable across retries).

    Handing aiohttp a 16 MiB bytes object makes Python 3.11's asyncio join it with the headers and
    then copy whatever the socket does not take at once into the transport's buffer: two extra
    copies of every part, held in memory while in flight. Slices go out under aiohttp's drain()
    back-pressure instead, so no part is ever copied.
    """

    async def write(self, writer) -> None:
        await self.write_with_length(writer, None)

    async def write_with_length(self, writer, content_length: int | None) -> None:
        view = memoryview(self._value)
        if content_length is not None:
            view = view[:content_length]
        for i in range(0, len(view), SEND_SLICE):
            await writer.write(view[i:i + SEND_SLICE])


def body(data: bytes, content_type: str = DEFAULT_CONTENT_TYPE) -> SlicedBytes:
    """`data` as a request body that is never copied on its way to the socket."""
    return SlicedBytes(data, content_type=content_type)
