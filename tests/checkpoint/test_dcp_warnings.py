"""A single-process DCP save and load (the README's tour) show no "assuming the intent is to save in a single
process" warnings; a process a launcher started as one of several still gets them (a missing
init_process_group there is a mistake)."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed.checkpoint as dcp

from fluxfs.pipes import FluxStorageReader, FluxStorageWriter

WARNING = "torch.distributed is disabled, unavailable or uninitialized, assuming the intent is to"
LAUNCHERS = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def _save_and_load(flux_server, bucket: str) -> list[str]:
    """The warnings a save and a load show, with the filters a fresh process has (restored after)."""
    url, options = f"flux://{bucket}/dcp/step-1", {"endpoint_url": flux_server.url, "token": "anon"}
    state, got = {"w": torch.arange(6.0)}, {"w": torch.zeros(6)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.simplefilter("default")
        dcp.save(state, storage_writer=FluxStorageWriter(url, **options))
        dcp.load(got, storage_reader=FluxStorageReader(url, **options))
    assert torch.equal(got["w"], state["w"])
    return [str(w.message) for w in caught]


@pytest.fixture
def fresh(monkeypatch):
    """No launcher in the environment."""
    for name in LAUNCHERS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_single_process_save_and_load_are_quiet(fresh, flux_server, bucket):
    assert not [m for m in _save_and_load(flux_server, bucket) if WARNING in m]


def test_one_of_several_processes_is_still_warned(fresh, flux_server, bucket):
    fresh.setenv("WORLD_SIZE", "2")
    shown = [m for m in _save_and_load(flux_server, bucket) if WARNING in m]
    assert [m.split(WARNING)[1] for m in shown] == [" save in a single process.", " load in a single process."]
