"""A writer process for the kill test: uploads through fluxfs and says when parts are in flight.

Usage: python -m tests.writes.writer_proc URL BUCKET KEY MULTIPART PART_SIZE [exit]
With "exit", it writes a few parts and exits normally without closing the file.
"""
from __future__ import annotations

import sys

from fluxfs import FluxFileSystem


def main(url: str, bucket: str, key: str, multipart: str, part_size: str, how: str = "kill") -> None:
    part = int(part_size)
    fs = FluxFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True, multipart=multipart,
                        part_size=part, write_concurrency=2)
    chunk = bytes(range(256)) * (part // 256)
    if how == "exit":
        f = fs.open(f"{bucket}/{key}", "wb")
        for _ in range(3):
            f.write(chunk)
        print("EXITING", flush=True)
        global _keep
        _keep = f  # still referenced at exit: only the atexit hook can abort it
        sys.exit(0)
    with fs.open(f"{bucket}/{key}", "wb") as f:
        for i in range(1000):  # far more than the test lets it write
            f.write(chunk)
            if i == 3:
                print("PARTS-IN-FLIGHT", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
