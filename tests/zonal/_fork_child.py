"""The fork check of test_grpc_io.py, in a fresh interpreter: ``python -m tests.zonal._fork_child SPEC_JSON``.

Reads one object over gRPC (the channel open), forks a Pool of 2 workers that each read over gRPC through the
same filesystem object, reads again in the parent, and prints one JSON line: what each child's client count
was when it started, the sha256 of what each read, and the parent's read after the fork."""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import sys

from fluxfs import FluxFileSystem
from fluxfs.zonal import grpc_client

_AT_START: list = []
_FS: FluxFileSystem | None = None


def _child_started() -> None:
    _AT_START.append(grpc_client.client_count())


def _child_read(path: str) -> tuple[int, str]:
    return _AT_START[0], hashlib.sha256(_FS.cat_file(path)).hexdigest()


def main(spec: dict) -> dict:
    global _FS
    _FS = FluxFileSystem(endpoint_url=spec["http_url"], token="anon", skip_instance_cache=True,
                         grpc_endpoint=spec["grpc_endpoint"], **spec["options"])
    paths = spec["paths"]
    _FS.cat_file(paths[0])
    parent_clients = grpc_client.client_count()
    with multiprocessing.get_context("fork").Pool(2, initializer=_child_started) as pool:
        got = pool.map(_child_read, paths)
    return {"parent_clients": parent_clients, "children_started_with": [n for n, _ in got],
            "children_read": [h for _, h in got], "parent_after": hashlib.sha256(_FS.cat_file(paths[1])).hexdigest()}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
