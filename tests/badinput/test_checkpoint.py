"""Bad-input catalogue: loading things that are not checkpoints, interrupted saves (docs/bad-inputs.md)."""
from __future__ import annotations

import pickle

import pytest
import torch
from torch.distributed.checkpoint.api import CheckpointException

from .conftest import assert_nothing_left


class Unpicklable:
    """Fails half-way through torch.save, after the tensors before it were written."""

    def __reduce__(self):
        raise RuntimeError("cannot pickle Unpicklable")


class Custom:
    def __init__(self, value):
        self.value = value


@pytest.fixture
def ckpt(storage_options):
    from fluxfs.pipes import FluxCheckpoint

    return FluxCheckpoint(**storage_options, part_size=5 * 2**20)


def test_load_of_a_text_object(ckpt, fs, bucket):
    fs.pipe_file(f"{bucket}/notes.txt", b"hello, this is not a checkpoint\n" * 10)
    url = f"flux://{bucket}/notes.txt"
    with pytest.raises(pickle.UnpicklingError, match=f"{url} is not a torch checkpoint"):
        ckpt.load(url)


def test_load_of_an_empty_object(ckpt, fs, bucket):
    fs.pipe_file(f"{bucket}/empty.pt", b"")
    url = f"flux://{bucket}/empty.pt"
    with pytest.raises(pickle.UnpicklingError, match=f"{url} is not a torch checkpoint"):
        ckpt.load(url)


def test_load_of_a_missing_checkpoint(ckpt, bucket):
    with pytest.raises(FileNotFoundError, match=f"No such object or bucket: {bucket}/nope.pt: No such object"):
        ckpt.load(f"flux://{bucket}/nope.pt")


def test_load_of_arbitrary_objects_is_refused_by_default(ckpt, bucket):
    url = f"flux://{bucket}/custom.pt"
    ckpt.save({"w": torch.ones(2), "obj": Custom(3)}, url)
    with pytest.raises(pickle.UnpicklingError, match=rf"{url} holds objects other than tensors .* "
                                                     r"pass weights_only=False"):
        ckpt.load(url)
    assert ckpt.load(url, weights_only=False)["obj"].value == 3


@pytest.mark.parametrize("size", [1000, 3 * 2**20], ids=["small", "multipart"])
def test_interrupted_save_leaves_no_object(ckpt, flux_server, bucket, size):
    url = f"flux://{bucket}/model.pt"
    # The tensor (up to 12 MiB: several 5 MiB parts already uploaded) is written before the failure.
    with pytest.raises(RuntimeError, match="cannot pickle Unpicklable"):
        ckpt.save({"w": torch.randn(size), "bad": Unpicklable()}, url)
    assert flux_server.list_names(bucket) == []
    assert_nothing_left(flux_server, bucket)


def test_interrupted_save_keeps_the_previous_checkpoint(ckpt, flux_server, bucket):
    url = f"flux://{bucket}/model.pt"
    ckpt.save({"w": torch.arange(10)}, url)
    with pytest.raises(RuntimeError, match="cannot pickle Unpicklable"):
        ckpt.save({"w": torch.randn(3 * 2**20), "bad": Unpicklable()}, url)
    assert torch.equal(ckpt.load(url)["w"], torch.arange(10))
    assert_nothing_left(flux_server, bucket)


@pytest.mark.parametrize("size", [1000, 10_000_000], ids=["small", "multipart"])
def test_save_to_a_missing_bucket_names_it(ckpt, size):
    # Multipart (40 MB, parts of 5 MiB): a part fails while torch.save's zip writer is still
    # writing, and its own "unexpected pos" RuntimeError used to replace the real error.
    with pytest.raises(FileNotFoundError, match="The specified bucket does not exist: no-such-bucket"):
        ckpt.save({"w": torch.randn(size)}, "flux://no-such-bucket/model.pt")


def test_save_denied_is_a_permission_error_and_leaves_nothing(ckpt, flux_server, bucket):
    flux_server.configure(deny_ops={"write"})
    with pytest.raises(PermissionError, match=rf"Permission denied \(HTTP 403\) for {bucket}/model.pt"):
        ckpt.save({"w": torch.randn(10_000_000)}, f"flux://{bucket}/model.pt")
    flux_server.configure(deny_ops=set())
    assert flux_server.list_names(bucket) == []
    assert_nothing_left(flux_server, bucket)


def test_dcp_save_to_a_missing_bucket_names_it(storage_options):
    import torch.distributed.checkpoint as dcp

    from fluxfs.pipes import FluxStorageWriter

    writer = FluxStorageWriter("flux://no-such-bucket/ckpt", **storage_options)
    with pytest.raises(CheckpointException) as caught:  # dcp wraps what each rank raised
        dcp.save({"w": torch.randn(3 * 2**20)}, storage_writer=writer, no_dist=True)
    error = caught.value.failures[0][0]
    assert isinstance(error, FileNotFoundError)
    assert str(error) == "DCP save to flux://no-such-bucket/ckpt: bucket 'no-such-bucket' does not exist"


def test_dcp_save_denied_is_a_permission_error_and_writes_no_metadata(storage_options, flux_server, bucket):
    import torch.distributed.checkpoint as dcp

    from fluxfs.pipes import FluxStorageWriter

    flux_server.configure(deny_ops={"write"})
    writer = FluxStorageWriter(f"flux://{bucket}/ckpt", part_size=5 * 2**20, **storage_options)
    with pytest.raises(CheckpointException) as caught:
        dcp.save({"w": torch.randn(3 * 2**20)}, storage_writer=writer, no_dist=True)
    error = caught.value.failures[0][0]
    assert isinstance(error, PermissionError), repr(error)  # not torch's "unexpected pos" RuntimeError
    assert f"Permission denied (HTTP 403) for {bucket}/ckpt/__0_0.distcp" in str(error)
    flux_server.configure(deny_ops=set())
    assert flux_server.list_names(bucket) == []
    assert_nothing_left(flux_server, bucket)


class _Payload:
    """What an attacker writes as ``.metadata``: unpickling it runs code (here: it writes a file)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def test_dcp_load_of_metadata_that_runs_code_is_refused(storage_options, fs, bucket, tmp_path):
    import torch.distributed.checkpoint as dcp

    from fluxfs.pipes.dcp import FluxStorageReader, FluxStorageWriter, UnsafeCheckpointError

    url = f"flux://{bucket}/ckpt"
    dcp.save({"w": torch.ones(4)}, storage_writer=FluxStorageWriter(url, **storage_options), no_dist=True)
    marker = tmp_path / "ran"
    fs.pipe_file(f"{bucket}/ckpt/.metadata", pickle.dumps(_Payload(str(marker))))
    with pytest.raises(UnsafeCheckpointError) as refused:
        FluxStorageReader(url, **storage_options).read_metadata()
    assert str(refused.value) == (
        f"refusing to load {url}/.metadata: it names builtins.exec, which is not a type of DCP checkpoint "
        "metadata (a pickle naming other callables can run code on this machine). If you trust everyone who can "
        "write to this location, load with FluxStorageReader(..., trust_metadata=True), or allow the type with "
        "torch.serialization.add_safe_globals([builtins.exec])")
    with pytest.raises(CheckpointException, match=r"refusing to load .*/ckpt/\.metadata: it names builtins\.exec"):
        dcp.load({"w": torch.zeros(4)}, storage_reader=FluxStorageReader(url, **storage_options), no_dist=True)
    assert not marker.exists()
    # The explicit opt-out unpickles as torch's own reader does (and so runs the payload).
    with pytest.raises(CheckpointException):  # the payload is not metadata: the load fails after running it
        dcp.load({"w": torch.zeros(4)}, no_dist=True,
                 storage_reader=FluxStorageReader(url, trust_metadata=True, **storage_options))
    assert marker.read_text() == "ran"


def test_dcp_load_of_nested_trainer_state_still_works(storage_options, bucket):
    """A Lightning/FSDP-like nested state (optimizer state, param groups, hyper-parameters, loops) loads
    through the restricted unpickler."""
    import torch.distributed.checkpoint as dcp

    from fluxfs.pipes.dcp import FluxStorageReader, FluxStorageWriter

    def state(fill):
        return {"state_dict": {"model": {"layer.0.weight": torch.full((4, 3), fill),
                                         "layer.0.bias": torch.full((4,), fill, dtype=torch.bfloat16)},
                               "optimizer": {"state": {0: {"step": torch.tensor(fill),
                                                           "exp_avg": torch.full((4, 3), fill)}},
                                             "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99), "params": [0]}]}},
                "epoch": int(fill), "global_step": 10 * int(fill),
                "hyper_parameters": {"name": "run", "layers": [4, 3]},
                "loops": {"fit_loop": {"epoch_progress": {"current": {"completed": int(fill)}}}}}

    url = f"flux://{bucket}/trainer"
    saved = state(2.0)
    dcp.save(saved, storage_writer=FluxStorageWriter(url, **storage_options), no_dist=True)
    target = state(0.0)
    dcp.load(target, storage_reader=FluxStorageReader(url, **storage_options), no_dist=True)
    assert torch.equal(target["state_dict"]["model"]["layer.0.weight"], saved["state_dict"]["model"]["layer.0.weight"])
    assert target["state_dict"]["model"]["layer.0.bias"].dtype == torch.bfloat16
    assert torch.equal(target["state_dict"]["optimizer"]["state"][0]["exp_avg"], torch.full((4, 3), 2.0))
    assert target["state_dict"]["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.99)
    assert (target["epoch"], target["global_step"], target["loops"]["fit_loop"]["epoch_progress"]["current"]) == \
        (2, 20, {"completed": 2})
