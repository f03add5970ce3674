"""fluxfs.pipes.safetensors against the safetensors package: the same bytes both ways, every dtype torch has."""
from __future__ import annotations

import pytest
import safetensors
import safetensors.torch as st
import torch

from fluxfs.pipes.safetensors import load_file, safe_open, save_file
from fluxfs.pipes.weights.header import DTYPES
from tests.conftest import make_fs


def sample(dtype: torch.dtype, shape: tuple, seed: int) -> torch.Tensor:
    """Deterministic content of any dtype (random bytes reinterpreted; bools kept 0/1, floats finite)."""
    g = torch.Generator().manual_seed(seed)
    n = int(torch.Size(shape).numel())
    if dtype == torch.bool:
        return (torch.randint(0, 2, (n,), generator=g) == 1).reshape(shape)
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(n, generator=g).to(dtype).reshape(shape) if not dtype.is_complex else \
            torch.randn(n, 2, generator=g).view(torch.complex64).reshape(shape).to(dtype)
    return torch.randint(0, 100, (n,), generator=g).to(dtype).reshape(shape)


def every_dtype() -> dict[str, torch.Tensor]:
    """One tensor per dtype (odd lengths, so later tensors start unaligned), plus empty and 0-d ones."""
    out = {}
    for i, (name, dtype) in enumerate(sorted(DTYPES.items())):
        out[f"t.{name}"] = sample(dtype, (3, 7 + i), i)
        out[f"empty.{name}"] = torch.empty((0, 5), dtype=dtype)
        out[f"scalar.{name}"] = sample(dtype, (), 100 + i)
    return out


def same(a: dict, b: dict) -> None:
    assert list(sorted(a)) == list(sorted(b))
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert a[k].view(-1).view(torch.uint8).tolist() == b[k].view(-1).view(torch.uint8).tolist() \
            if a[k].numel() else True, k


@pytest.fixture
def wfs(flux_server):
    return make_fs(flux_server, part_size=5 * 2**20)


def test_our_bytes_are_the_packages_bytes_for_every_dtype(wfs, bucket):
    tensors = every_dtype()
    save_file(tensors, f"flux://{bucket}/m.safetensors", fs=wfs)
    assert wfs.cat_file(f"{bucket}/m.safetensors") == st.save(tensors)
    save_file(tensors, f"flux://{bucket}/meta.safetensors", metadata={"format": "pt"}, fs=wfs)
    assert wfs.cat_file(f"{bucket}/meta.safetensors") == st.save(tensors, metadata={"format": "pt"})


def test_files_from_either_side_load_in_the_other(wfs, bucket, tmp_path):
    tensors = every_dtype()
    meta = {"format": "pt", "ünïcode": "välue", "empty": ""}
    wfs.pipe_file(f"{bucket}/theirs.safetensors", st.save(tensors, metadata=meta))
    same(load_file(f"flux://{bucket}/theirs.safetensors", fs=wfs), tensors)
    with safe_open(f"flux://{bucket}/theirs.safetensors", fs=wfs) as f:
        assert f.metadata() == meta
    save_file(tensors, f"flux://{bucket}/ours.safetensors", metadata=meta, fs=wfs)
    local = tmp_path / "ours.safetensors"
    local.write_bytes(wfs.cat_file(f"{bucket}/ours.safetensors"))
    same(st.load_file(str(local)), tensors)
    with safetensors.safe_open(str(local), framework="pt") as f:
        assert f.metadata() == meta


def test_empty_dict_and_only_empty_tensors(wfs, bucket):
    for tensors in ({}, {"e": torch.empty(0)}, {"z": torch.zeros((2, 0, 3), dtype=torch.bfloat16)}):
        save_file(tensors, f"flux://{bucket}/e.safetensors", fs=wfs)
        assert wfs.cat_file(f"{bucket}/e.safetensors") == st.save(tensors)
        same(load_file(f"flux://{bucket}/e.safetensors", fs=wfs), tensors)


@pytest.mark.parametrize("odd", [1, 3, 4095, 65537])
def test_odd_lengths_across_parts_ranges_and_the_header_probe(flux_server, bucket, odd):
    """Tensors straddling 5 MiB parts (save), 1 MiB ranges and the 256 KiB header GET (load)."""
    fs = make_fs(flux_server, part_size=5 * 2**20)
    tensors = {f"w{i}": sample(torch.uint8 if i % 2 else torch.float32, (odd + 131_071 * i,), i) for i in range(12)}
    save_file(tensors, f"flux://{bucket}/odd.safetensors", fs=fs)
    raw = fs.cat_file(f"{bucket}/odd.safetensors")
    assert raw == st.save(tensors) and len(raw) > 5 * 2**20 + 1
    import fluxfs.reads.into as into
    old = into.DEFAULT_CHUNK
    into.DEFAULT_CHUNK = 2**20 + 7
    try:
        same(load_file(f"flux://{bucket}/odd.safetensors", fs=fs), tensors)
    finally:
        into.DEFAULT_CHUNK = old


def test_non_contiguous_and_views_save_their_values(wfs, bucket):
    base = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    tensors = {"t": base.t(), "row": base[3], "step": base[:, ::2]}
    save_file(tensors, f"flux://{bucket}/v.safetensors", fs=wfs)
    got = load_file(f"flux://{bucket}/v.safetensors", fs=wfs)
    for k, v in tensors.items():
        assert torch.equal(got[k], v)


def test_round_trip_and_slices_on_both_servers(any_fs, any_bucket):
    """fake-gcs-server too: its ranged GETs and crc32c headers are what the loader relies on."""
    tensors = {"w": torch.arange(3000, dtype=torch.float32).reshape(30, 100), "b": torch.ones(7, dtype=torch.bfloat16)}
    url = f"flux://{any_bucket}/w.safetensors"
    save_file(tensors, url, metadata={"k": "v"}, fs=any_fs)
    assert any_fs.cat_file(f"{any_bucket}/w.safetensors") == st.save(tensors, metadata={"k": "v"})
    same(load_file(url, fs=any_fs), tensors)
    with safe_open(url, fs=any_fs) as f:
        assert torch.equal(f.get_slice("w")[10:20, 5:7], tensors["w"][10:20, 5:7])


def test_a_header_larger_than_the_first_get(wfs, bucket):
    """A header of ~400 KiB (thousands of tensors) is longer than the 256 KiB the first GET asks for."""
    tensors = {f"model.layers.{i}.a_rather_long_parameter_name_{'x' * 40}": torch.full((3,), float(i))
               for i in range(3000)}
    wfs.pipe_file(f"{bucket}/many.safetensors", st.save(tensors))
    raw = wfs.cat_file(f"{bucket}/many.safetensors")
    assert int.from_bytes(raw[:8], "little") > 256 * 1024
    same(load_file(f"flux://{bucket}/many.safetensors", fs=wfs), tensors)
    with safe_open(f"flux://{bucket}/many.safetensors", fs=wfs) as f:
        assert len(f.keys()) == 3000
