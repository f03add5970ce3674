"""How a bucket's objects travel, decided in one place: the bucket's layout (`layout.py`) and the filesystem's
`zonal_transport` option mapped to a `Transport` (as gcsfs's `extended_gcsfs` maps a bucket type to a strategy),
whose answers reads, writes, copies and appends ask instead of deciding for themselves.

A standard or HNS bucket: HTTP, compose and rewrite exist. A zonal (Rapid) bucket: no compose, no rewrite; with
`zonal_transport="grpc"` (the default) its objects are read over `BidiReadObject` and written (and appended to)
as appendable objects over `BidiWriteObject`, except in a process forked while gRPC channels stayed open in its
parent (`grpc_client.grpc_usable`), which reads and writes it over HTTP, as with `zonal_transport="http"`.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ZonalUnsupported
from .grpc_client import GRPC, grpc_usable
from .layout import BucketLayout, known, layout, layout_sync

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client


@dataclass(frozen=True)
class Transport:
    """What one bucket's reads and writes may do, and over what."""

    bucket: str
    zonal: bool = False  # a zonal (Rapid) bucket: GCS has no compose or rewrite there
    grpc: bool = False   # its objects read and written over gRPC (bidi reads, appendable objects)

    @property
    def compose(self) -> bool:
        """Whether compose exists (batched reads' composites, compose writes, the compose "ab")."""
        return not self.zonal

    @property
    def rewrite(self) -> bool:
        """Whether a server-side copy (rewrite) exists; else a copy reads the object and writes it."""
        return not self.zonal

    def refuse_compose(self, what: str) -> None:
        """ZonalUnsupported naming `what` (such as "append to B/K") when there is no compose."""
        if not self.compose:
            raise ZonalUnsupported(f"cannot {what}: bucket {self.bucket} is zonal (Rapid), where GCS has no compose; "
                                   "appending there is a gRPC appendable upload (zonal_transport='grpc', the default)")


def assumed(bucket: str) -> Transport:
    """The transport of a bucket whose layout is not asked (nothing the caller does differs by it): HTTP."""
    return Transport(bucket)


def of_layout(client: "Client", lay: BucketLayout) -> Transport:
    """The transport of a bucket of layout `lay` for `client`'s options (and this process's gRPC)."""
    grpc = lay.zonal and client.options.zonal_transport == GRPC and grpc_usable()
    return Transport(lay.bucket, zonal=lay.zonal, grpc=grpc)


async def of(client: "Client", bucket: str) -> Transport:
    """`bucket`'s transport, its layout looked up if not known yet (copies, merges, a write's compose fallback)."""
    return of_layout(client, await layout(client, bucket))


def of_sync(client: "Client", bucket: str) -> Transport:
    """`of` from blocking code (an "ab" handle being opened)."""
    return of_layout(client, layout_sync(client, bucket))


def _differs(client: "Client", composes: bool) -> bool:
    """Whether a write could differ by its bucket's layout: it would compose (none on zonal buckets), or zonal
    buckets take gRPC."""
    return composes or client.options.zonal_transport == GRPC


async def for_write(client: "Client", bucket: str, composes: bool) -> Transport:
    """`bucket`'s transport for a write (`composes`: its strategy would compose its parts), the layout asked only
    where the write could differ by it, else HTTP (`assumed`)."""
    return await of(client, bucket) if _differs(client, composes) else assumed(bucket)


def for_write_sync(client: "Client", bucket: str, composes: bool) -> Transport:
    """`for_write` from blocking code (a handle being opened): a layout already known answers without the loop."""
    return of_sync(client, bucket) if _differs(client, composes) else assumed(bucket)


def for_read(client: "Client", bucket: str) -> Transport:
    """`bucket`'s transport for a read, which never waits for a lookup: a layout not known yet is looked up in the
    background and this read goes over HTTP, which zonal buckets serve too, so a read of another bucket never
    waits for it. Only asked where gRPC could be taken (`zonal_transport="grpc"`)."""
    if client.options.zonal_transport != GRPC:
        return assumed(bucket)
    found = known(client, bucket)
    if found is None:
        _look_up_soon(client, bucket)
        return assumed(bucket)
    return of_layout(client, found)


def _look_up_soon(client: "Client", bucket: str) -> None:
    """Start `bucket`'s layout lookup without waiting for it (its failure only leaves the layout unknown)."""
    task = asyncio.ensure_future(layout(client, bucket))
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


async def without_compose(client: "Client", groups: list[list], direct: list) -> tuple[list[list], list]:
    """Composite groups (of objects with a `.bucket`) split off to `direct` when their bucket has no compose.

    The layout is asked only for buckets that have a group (nothing else would behave differently)."""
    buckets = {g[0].bucket for g in groups}
    refused = {b for b in buckets if not (await of(client, b)).compose}
    if not refused:
        return groups, direct
    moved = [o for g in groups if g[0].bucket in refused for o in g]
    return [g for g in groups if g[0].bucket not in refused], direct + moved
