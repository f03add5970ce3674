"""Google's own gRPC clients, unchanged, pointed at the embedded server's one URL (the host:port of its HTTP
endpoint): google-cloud-storage's asyncio client (AnonymousCredentials, api_endpoint) and the storage-control
client over an insecure channel; raw `BidiWriteObject` streams and their requests, built from the client
library's own message types; and zonal buckets made over the JSON API."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from typing import Any, AsyncIterator, Awaitable, Tuple

import grpc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import _storage_v2 as v2
from google.cloud import storage_control_v2
from google.cloud.storage.asyncio.async_grpc_client import AsyncGrpcClient
from google.cloud.storage_control_v2.services.storage_control.transports import StorageControlGrpcAsyncIOTransport

from tests.server import raw

ZONAL = {"location": "us-central1", "storageClass": "RAPID",
         "customPlacementConfig": {"dataLocations": ["us-central1-a"]},
         "hierarchicalNamespace": {"enabled": True},
         "iamConfiguration": {"uniformBucketLevelAccess": {"enabled": True}}}


def endpoint(url: str) -> str:
    """host:port of the server's http:// URL: where gRPC goes too."""
    return url.split("://", 1)[1].rstrip("/")


def make_bucket(url: str, **layout: Any) -> str:
    """A new bucket (zonal unless `layout` says otherwise), made over the JSON API."""
    name = f"g{uuid.uuid4().hex[:12]}"
    r = raw.request(url, "POST", "/storage/v1/b", body=json.dumps({"name": name, **(layout or ZONAL)}).encode(),
                    headers={"Content-Type": "application/json"})
    assert r.status == 200, r
    return name


def stored_object(url: str, name: str, size: int) -> Tuple[str, str, bytes]:
    """(bucket, name, bytes) of `size` random bytes uploaded over HTTP to a new zonal bucket."""
    bucket = make_bucket(url)
    data = os.urandom(size)
    assert raw.upload(url, bucket, name, data).status == 200
    return bucket, name, data


@contextlib.asynccontextmanager
async def storage(url: str) -> AsyncIterator[AsyncGrpcClient]:
    """google-cloud-storage's asyncio gRPC client (inside the event loop that uses it), its channel closed after."""
    options = ClientOptions(api_endpoint=endpoint(url))
    client = AsyncGrpcClient(credentials=AnonymousCredentials(), client_options=options)
    try:
        yield client
    finally:
        await client.grpc_client.transport.close()


def control(url: str) -> storage_control_v2.StorageControlAsyncClient:
    """The storage-control client over an insecure channel to the server's port."""
    channel = grpc.aio.insecure_channel(endpoint(url))
    return storage_control_v2.StorageControlAsyncClient(transport=StorageControlGrpcAsyncIOTransport(channel=channel))


def arun(coro: Awaitable[Any], timeout: float = 30) -> Any:
    """Run `coro` to its end in a fresh event loop, failing after `timeout` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def stream_call(channel: grpc.aio.Channel, method: str, req: Any, resp: Any) -> Any:
    """The raw stream-stream `google.storage.v2.Storage/<method>` on `channel`, with `req`/`resp` as its types."""
    return channel.stream_stream(f"/google.storage.v2.Storage/{method}", request_serializer=req.serialize,
                                 response_deserializer=resp.deserialize)


def bidi_write(channel: grpc.aio.Channel) -> Any:
    """The raw `BidiWriteObject` call on `channel`: each call of it opens a stream."""
    return stream_call(channel, "BidiWriteObject", v2.BidiWriteObjectRequest, v2.BidiWriteObjectResponse)


def write_spec(bucket: str, name: str, appendable: bool = True) -> v2.BidiWriteObjectRequest:
    """The first request of a stream writing `bucket`/`name` anew (appendable unless said otherwise)."""
    return v2.BidiWriteObjectRequest(write_object_spec=v2.WriteObjectSpec(
        resource=v2.Object(name=name, bucket=f"projects/_/buckets/{bucket}"), appendable=appendable))


def append_spec(bucket: str, name: str, generation: int) -> v2.BidiWriteObjectRequest:
    """The first request of a stream taking over `generation` of the appendable `bucket`/`name`."""
    return v2.BidiWriteObjectRequest(append_object_spec=v2.AppendObjectSpec(
        bucket=f"projects/_/buckets/{bucket}", object_=name, generation=generation))


def write_data(offset: int, content: bytes, flush: bool = True, **checksums: Any) -> v2.BidiWriteObjectRequest:
    """`content` at `offset` (`checksums`: ChecksummedData's crc32c), flushed and asking for the persisted size
    unless not `flush`."""
    return v2.BidiWriteObjectRequest(write_offset=offset, flush=flush, state_lookup=flush,
                                     checksummed_data=v2.ChecksummedData(content=content, **checksums))
