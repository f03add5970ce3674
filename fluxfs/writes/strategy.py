"""What an upload strategy is: the `Uploader` protocol the part pipeline drives, and `BaseUploader`,
the defaults every strategy starts from (each sets only what differs)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ..gcs.limits import MAX_OBJECT_SIZE

if TYPE_CHECKING:  # pragma: no cover
    from .parts import PartWriter


class Uploader(Protocol):
    """One upload strategy. Every method is awaited on the filesystem's event loop."""

    #: True when parts must go up one after the other, and the tail goes with `complete`.
    sequential: bool
    #: The most parts one upload may have (XML multipart: 10,000; compose: the compose_max_components
    #: option), or None for no limit; with `max_object_size` (GCS's 5 TiB) and the write_memory budget it
    #: sets how part sizes grow (writes/schedule.py).
    max_parts: int | None
    #: The option that sets `max_parts`, or None when it is the server's fixed limit.
    cap_setting: str | None
    max_object_size: int
    #: True when a part cancelled mid-request could still be created afterwards (so abort must let
    #: requests in flight finish, without further retries, before deleting what they made).
    drain_on_abort: bool
    #: True when the object's fields are sent with `complete` (so they may change until then).
    fields_at_complete: bool

    @classmethod
    def part_cap(cls, client: Any) -> int | None: ...  # `max_parts` of a write of `client`, before it starts
    async def start(self) -> None: ...
    async def upload_part(self, number: int, data: bytes, crc: int) -> Any: ...
    async def complete(self, results: list, size: int, crc: int, tail: bytes, tail_crc: int) -> dict: ...
    async def abort(self) -> None: ...


class BaseUploader:
    """The protocol's defaults: parts in parallel, no part cap, fields sent at the start, nothing to drain."""

    sequential = False
    max_parts: "int | None" = None
    max_object_size = MAX_OBJECT_SIZE
    cap_setting: "str | None" = None
    fields_at_complete = False
    drain_on_abort = False

    def __init__(self, pw: "PartWriter"):
        self.pw = pw
        self.client = pw.client

    @classmethod
    def part_cap(cls, client: Any) -> "int | None":
        """`max_parts` of a write of `client`, known before it starts."""
        return cls.max_parts
