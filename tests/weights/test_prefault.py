"""Fresh tensors' pages are mapped ahead of their bytes on another thread, so the event loop's thread,
which receives the bytes, no longer pays a page fault per 4 KiB (pipes/weights/prefault.py)."""
from __future__ import annotations

import ctypes
import resource
import sys
import threading

import pytest
import safetensors.torch as st
import torch

from fluxfs.pipes.safetensors import load_model_dir
from fluxfs.pipes.weights import prefault
from fluxfs.pipes.weights.objects import byte_view
from tests.conftest import make_fs

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE is Linux's")
SIZE = 64 << 20  # above glibc's largest mmap threshold: a fresh mapping, no page of it touched yet


def _faults_writing(t: torch.Tensor) -> int:
    """Page faults this thread takes writing every byte of `t`."""
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    ctypes.memset(t.data_ptr(), 1, t.numel())
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before


def _ahead(t: torch.Tensor, stop: threading.Event) -> None:
    done = prefault.ahead([byte_view(t)], stop)
    if done is not None:
        done.result(timeout=60)


@linux
def test_pages_are_mapped_ahead_so_the_writer_takes_no_faults():
    cold = _faults_writing(torch.empty(SIZE, dtype=torch.uint8))
    if cold < SIZE // 4096 // 2:
        pytest.skip(f"writing {SIZE} fresh bytes took only {cold} faults here (huge pages): nothing to save")
    t = torch.empty(SIZE, dtype=torch.uint8)
    _ahead(t, threading.Event())
    if prefault._madvise is None:
        pytest.skip("this kernel has no MADV_POPULATE_WRITE")
    assert _faults_writing(t) < cold // 20


@linux
def test_a_stopped_prefault_maps_nothing():
    cold = _faults_writing(torch.empty(SIZE, dtype=torch.uint8))
    t = torch.empty(SIZE, dtype=torch.uint8)
    stop = threading.Event()
    stop.set()
    _ahead(t, stop)
    assert _faults_writing(t) > cold // 2


def test_small_and_read_only_buffers_are_left_alone():
    assert prefault.ahead([bytearray(4096)], threading.Event()) is None
    assert prefault.ahead([bytes(SIZE // 16)], threading.Event()) is None


def test_a_model_of_large_tensors_loads_byte_for_byte(flux_server, bucket):
    fs = make_fs(flux_server)
    torch.manual_seed(0)
    state = {"a": torch.randn(1024, 1024), "b": torch.randn(3, 1000, 1001).to(torch.bfloat16), "c": torch.randn(7)}
    fs.pipe_file(f"{bucket}/big/model.safetensors", st.save(state))
    got = load_model_dir(f"flux://{bucket}/big", fs=fs)
    assert sorted(got) == sorted(state)
    for name, want in state.items():
        assert got[name].dtype == want.dtype and torch.equal(got[name], want)
