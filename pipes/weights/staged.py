"""Loading straight onto an accelerator: received bytes staged through a few pinned host buffers.

Tensors are allocated on the device; the object's bytes are read window by window (32 MiB) into one
of four pinned buffers and copied to the device asynchronously on a side stream, so the copy of one
window overlaps the download of the next ones and host memory stays at four windows, whatever the
model's size. (On the CPU the same path runs with pageable buffers; the tests use it there.)
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import Optional

import torch

from fluxfs import FluxFileSystem
from fluxfs.support import gather_all

from .header import TensorInfo
from .objects import Opened, byte_view, fill

WINDOW = 32 * 2**20
BUFFERS = 4


def windows(chosen: list[TensorInfo], window: int) -> list[list[tuple[int, int, str, int]]]:
    """The chosen tensors' bytes cut into windows: [(object offset, length, tensor name, offset in the tensor)]."""
    out: list[list[tuple[int, int, str, int]]] = [[]]
    room = window
    for t in chosen:
        done = 0
        while done < t.nbytes:
            if room == 0:
                out.append([])
                room = window
            take = min(room, t.nbytes - done)
            out[-1].append((t.start + done, take, t.name, done))
            done += take
            room -= take
    return [w for w in out if w]


async def load_staged(fs: FluxFileSystem, opened: Opened, chosen: list[TensorInfo], device: torch.device,
                      limit: Optional[asyncio.Semaphore] = None, window: int = WINDOW,
                      buffers: int = BUFFERS) -> dict[str, torch.Tensor]:
    """The chosen tensors on `device`, their bytes staged through `buffers` host buffers of `window` bytes."""
    cuda = device.type == "cuda"
    out = {t.name: torch.empty(t.shape, dtype=t.dtype, device=device) for t in chosen}
    flat = {n: t.reshape(-1).view(torch.uint8) for n, t in out.items() if t.numel()}
    free: asyncio.Queue = asyncio.Queue()
    for _ in range(buffers):
        free.put_nowait(torch.empty(window, dtype=torch.uint8, pin_memory=cuda))
    stream = torch.cuda.Stream(device) if cuda else None

    async def one(win: list[tuple[int, int, str, int]]) -> None:
        stage = await free.get()
        try:
            view, at, wants = byte_view(stage), 0, []
            for off, n, _, _ in win:
                wants.append((off, view[at:at + n]))
                at += n
            await fill(fs, opened, wants, limit)
            at = 0
            with torch.cuda.stream(stream) if cuda else contextlib.nullcontext():
                for _, n, name, d in win:
                    flat[name][d:d + n].copy_(stage[at:at + n], non_blocking=cuda)
                    at += n
                done = torch.cuda.Event() if cuda else None
                if done is not None:
                    done.record(stream)
            if done is not None:
                # The buffer is reused only once its copy has finished; waiting off the event loop.
                await asyncio.to_thread(done.synchronize)
        finally:
            free.put_nowait(stage)

    await gather_all(one(w) for w in windows(chosen, window))
    return out
