"""Google's own gRPC clients, unchanged, pointed at the embedded server's one URL (the host:port of its HTTP
endpoint): google-cloud-storage's asyncio client (AnonymousCredentials, api_endpoint) and the storage-control
client over an insecure channel; and zonal buckets made over the JSON API."""
from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any, Awaitable

import grpc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
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


def storage(url: str) -> AsyncGrpcClient:
    """google-cloud-storage's asyncio gRPC client (build it inside the event loop that uses it)."""
    return AsyncGrpcClient(credentials=AnonymousCredentials(), client_options=ClientOptions(api_endpoint=endpoint(url)))


def control(url: str) -> storage_control_v2.StorageControlAsyncClient:
    """The storage-control client over an insecure channel to the server's port."""
    channel = grpc.aio.insecure_channel(endpoint(url))
    return storage_control_v2.StorageControlAsyncClient(transport=StorageControlGrpcAsyncIOTransport(channel=channel))


def arun(coro: Awaitable[Any], timeout: float = 30) -> Any:
    """Run `coro` to its end in a fresh event loop, failing after `timeout` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))
