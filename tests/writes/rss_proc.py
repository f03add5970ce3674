"""Subprocess for the memory test: torch.save a state dict through fsspec.open("flux://...", "wb")
and print the peak extra RSS seen while saving (sampled with psutil), as JSON.

Usage: python -m tests.writes.rss_proc URL BUCKET MULTIPART PART_SIZE CONCURRENCY TENSOR_MIB COUNT
"""
from __future__ import annotations

import json
import sys
import threading
import time

import fsspec
import psutil
import torch


def main(url: str, bucket: str, multipart: str, part: str, conc: str, tensor_mib: str, count: str) -> None:
    gen = torch.Generator().manual_seed(0)
    sd = {f"w{i}": torch.randn(int(tensor_mib) * 2**18, generator=gen) for i in range(int(count))}
    sd.update({f"small{i}": torch.full((10,), float(i)) for i in range(50)})
    opts = dict(endpoint_url=url, token="anon", multipart=multipart, part_size=int(part),
                write_concurrency=int(conc))
    with fsspec.open(f"flux://{bucket}/warm", "wb", **opts) as f:  # session and imports outside the count
        f.write(b"x")
    proc = psutil.Process()
    base = proc.memory_info().rss
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.002)

    t = threading.Thread(target=sample)
    t.start()
    try:
        with fsspec.open(f"flux://{bucket}/ckpt.pt", "wb", **opts) as f:
            torch.save(sd, f)
    finally:
        done.set()
        t.join()
    state_bytes = sum(v.numel() * v.element_size() for v in sd.values())
    print(json.dumps({"extra_rss": peak[0] - base, "state_bytes": state_bytes}))


if __name__ == "__main__":
    main(*sys.argv[1:])
