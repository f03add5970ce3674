"""`FluxFileSystem`: gcsfs plus fluxfs's accelerations, registered for ``flux://`` URLs.

It subclasses ``gcsfs.core.GCSFileSystem`` (not ``gcsfs.GCSFileSystem``, whose bucket-layout
gRPC lookup stalls against any emulator). Listing, many-object reads and writes are
delegated to `listing`, `compose_reads`, `read_file` and `multipart`.
"""
from __future__ import annotations

import os
from typing import Any, AsyncIterator, Iterator
from urllib.parse import quote

from fsspec.asyn import sync_wrapper
from gcsfs.core import GCSFileSystem

from . import http, tempnames
from .retry import RetryPolicy, resolve_policies


class FluxFileSystem(GCSFileSystem):
    """fsspec filesystem for Google Cloud Storage with parallel listing, compose reads and multipart writes."""

    protocol = ("flux",)

    def __init__(
        self,
        *args: Any,
        list_concurrency: int | None = None,
        list_page_size: int = 1000,
        compose: bool = True,
        max_composite_size: int | None = None,
        compose_threshold: int | None = None,
        read_concurrency: int | None = None,
        multipart: str = "xml",
        part_size: int | None = None,
        write_concurrency: int | None = None,
        retry: Any = None,
        read_timeout: float = 60.0,
        job_id: str | None = None,
        progress: bool = False,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        if multipart not in ("xml", "compose", "off"):
            raise ValueError(f"multipart must be 'xml', 'compose' or 'off', not {multipart!r}")
        if not 1 <= list_page_size <= 1000:
            raise ValueError(f"list_page_size must be between 1 and 1000 (GCS's cap), not {list_page_size}")
        self.list_concurrency = list_concurrency
        self.list_page_size = list_page_size
        self.compose = compose
        self.max_composite_size = max_composite_size
        self.compose_threshold = compose_threshold
        self.read_concurrency = read_concurrency
        self.multipart = multipart
        self.part_size = part_size
        self.write_concurrency = write_concurrency
        self._retry_policies = resolve_policies(retry)
        self.http_timeout = http.client_timeout(read_timeout)
        self._job_id = job_id
        self._job_pid: int | None = None
        self.progress = progress

    # -- plumbing shared by the accelerations ---------------------------------------------

    def retry_policy(self, op: str) -> RetryPolicy:
        """The retry policy for an operation kind ("list", "read", "compose", "write", "delete")."""
        return self._retry_policies.get(op) or self._retry_policies["read"]

    @property
    def job_id(self) -> str:
        """Id for this process's temporary objects; regenerated after fork so workers never share one."""
        if self._job_id is not None:
            return self._job_id
        if self._job_pid != os.getpid():
            self._auto_job_id = tempnames.new_job_id()
            self._job_pid = os.getpid()
        return self._auto_job_id

    def json_url(self, fmt: str, *parts: str) -> str:
        """A JSON API URL: `fmt` like "b/{}/o/{}" with each part percent-encoded."""
        return self.base + fmt.format(*(quote(p, safe="") for p in parts))

    def upload_url(self, bucket: str) -> str:
        """The JSON API media upload URL of a bucket."""
        return f"{self._location}/upload/storage/v1/b/{quote(bucket, safe='')}/o"

    def xml_url(self, bucket: str, key: str = "") -> str:
        """An XML API URL (`/BUCKET/KEY`), used for multipart uploads."""
        return f"{self._location}/{quote(bucket, safe='')}/{quote(key, safe='/')}"

    def _open(self, path: str, mode: str = "rb", block_size: int | None = None, **kwargs: Any):
        """Read handles prefetch with parallel ranged GETs; write handles upload parts in parallel, atomically."""
        if "r" in mode:
            from .read_file import FluxReadFile

            return FluxReadFile(self, path, mode, block_size=block_size, **kwargs)
        if mode in ("wb", "xb"):
            from .multipart import FluxWriteFile

            return FluxWriteFile(self, path, mode, block_size=block_size, **kwargs)
        raise ValueError(f"unsupported mode {mode!r} for {path}: use 'rb', 'wb' or 'xb'")

    # -- listing (listing.py, manifest.py) ------------------------------------------------

    # -- batched reads (compose_reads.py) -------------------------------------------------

    # -- writes (multipart.py) ------------------------------------------------------------
