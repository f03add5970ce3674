"""Gloo ranks for test_group_exchange.py: ``python -m tests.weights._exchange_child MODE,... WORLD OUT PORT``.

Each rank fills its own share of the same items (`pattern`), completing its chunks' futures itself, and
moves the shares with `pipes.distributed.broadcast.share`, once per MODE. exact: every chunk ready at once; late:
rank 0's first chunk is ready only once rank 1 holds rank 0's later chunks (or after 20 s); fail:
rank 1's third chunk raises; broadcast: the NCCL path's rounds, run on gloo; subgroup: exact, over a
group of global ranks 1 and 2 (sends addressed by global rank). Writes {mode: report} to OUT/rank<r>.json.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import sys
import threading
import time

import torch

# Imported before the ranks fork (once, not once per rank).
from fluxfs.pipes.distributed.group import Group
from fluxfs.pipes.distributed.broadcast import _broadcast, rounds, share
from fluxfs.pipes.distributed.exchange import DIRECT
from fluxfs.pipes.distributed.plan import split_bytes

CHUNK = 2**20
# Large pieces sent straight from the tensors, small ones packed, a piece cut between ranks and chunks.
LENGTHS = [6 * 2**20 + 3, 100, 5, 2 * 2**20, 300 * 2**10, 10, 0, 2**20 + 7, 64 * 2**10]


def pattern(item: int, n: int) -> torch.Tensor:
    """Item `item`'s bytes: a 251-byte cycle (a prime: no piece or chunk boundary lines up with it) shifted per item."""
    cycle = bytes((k + item * 7) % 251 for k in range(251))
    if not n:
        return torch.zeros(0, dtype=torch.uint8)
    return torch.frombuffer(bytearray((cycle * (n // 251 + 1))[:n]), dtype=torch.uint8)


PATTERNS = [pattern(i, n) for i, n in enumerate(LENGTHS)]  # made once, before the ranks fork


def one(group: Group, mode: str, seen) -> dict:
    """This rank's report of one exchange in `mode` over `group`."""
    rank, world = group.rank, group.size
    report: dict = {}
    tensors = [torch.zeros(n, dtype=torch.uint8) for n in LENGTHS]
    buffers = [memoryview(t.numpy()).cast("B") if n else memoryview(bytearray()) for t, n in zip(tensors, LENGTHS)]
    parts = split_bytes(LENGTHS, world)
    plan = rounds(parts, CHUNK)

    def fill(chunk) -> None:
        for p in chunk:
            tensors[p.item][p.offset:p.offset + p.length] = PATTERNS[p.item][p.offset:p.offset + p.length]

    def holds(chunks) -> bool:
        return all(torch.equal(tensors[p.item][p.offset:p.offset + p.length],
                               PATTERNS[p.item][p.offset:p.offset + p.length])
                   for c in chunks for p in c)

    pending: list = []
    for i, chunk in enumerate(plan[rank]):
        f: concurrent.futures.Future = concurrent.futures.Future()
        if mode == "fail" and rank == 1 and i == 2:
            f.set_exception(RuntimeError("chunk 2 of rank 1 could not be read"))
        elif mode == "late" and rank == 0 and i == 0:
            def late(f=f, chunk=chunk) -> None:
                report["others_arrived_first"] = seen.wait(20)
                fill(chunk)
                f.set_result(None)
            threading.Thread(target=late, daemon=True).start()
        else:
            fill(chunk)
            f.set_result(None)
        pending.append(f)
    if mode == "late" and rank == 1:
        # Rank 0's chunks but its first, arriving while that one is not ready (the pieces that land straight
        # in the tensors: packed ones are unpacked once this rank's main thread gets to them).
        direct = [[p for p in c if p.length >= DIRECT] for c in plan[0][1:]]
        assert sum(map(len, direct)) >= 2

        def watch() -> None:
            while not holds(direct):
                time.sleep(0.01)
            seen.set()
        threading.Thread(target=watch, daemon=True).start()
    if mode == "broadcast":
        error = _broadcast(group, parts, buffers, pending, CHUNK)
    else:
        error = share(group, parts, buffers, pending, chunk=CHUNK)
    report["error"] = None if error is None else f"{type(error).__name__}: {error}"
    report["exact"] = {src: holds(plan[src]) for src in range(world)}
    return report


def rank_main(rank: int, world: int, modes: list, out: str, port: int, seen) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    report: dict = {}
    sub = dist.new_group([1, 2])  # every rank makes the call; ranks 1 and 2 are its ranks 0 and 1
    try:
        for mode in modes:
            if mode == "subgroup":
                if rank in (1, 2):
                    report[mode] = one(Group(sub, "test"), mode, seen)
            else:
                report[mode] = one(Group(None, "test"), mode, seen)
            dist.barrier()
    finally:
        with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
            json.dump(report, f)
        dist.destroy_process_group()


if __name__ == "__main__":
    import multiprocessing

    modes, world, out, port = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    seen = multiprocessing.get_context("fork").Event()
    torch.multiprocessing.start_processes(rank_main, args=(world, modes, out, port, seen), nprocs=world,
                                          start_method="fork")
