"""`fluxfs.register_gs()`: third-party code that names gs:// URLs (fsspec.open, pandas, Hugging Face datasets)
reads and writes through FluxFileSystem."""
from __future__ import annotations

import importlib

import fsspec
import pytest

import fluxfs
from fluxfs import FluxFileSystem


@pytest.fixture
def gs_is_flux(monkeypatch, flux_server):
    """gs:// and gcs:// registered to fluxfs for this test only (fsspec's registry restored after)."""
    registry = importlib.import_module("fsspec.registry")._registry  # (`fsspec.registry` is its read-only view)
    for protocol in ("gs", "gcs"):  # each entry put back as it was (removed if it was absent) after the test
        monkeypatch.setitem(registry, protocol, registry.get(protocol))
    fluxfs.register_gs()
    return {"endpoint_url": flux_server.url, "token": "anon"}


def test_gs_urls_open_with_fluxfs(gs_is_flux, flux_server, bucket):
    options = gs_is_flux
    with fsspec.open(f"gs://{bucket}/t.csv", "wb", **options) as f:
        f.write(b"a,b\n1,2\n3,4\n")
    fs, path = fsspec.url_to_fs(f"gcs://{bucket}/t.csv", **options)
    assert isinstance(fs, FluxFileSystem) and path == f"{bucket}/t.csv"
    assert flux_server.list_names(bucket) == ["t.csv"]
    pd = pytest.importorskip("pandas")
    assert pd.read_csv(f"gs://{bucket}/t.csv", storage_options=options).to_dict("list") == {"a": [1, 3], "b": [2, 4]}


def test_datasets_with_gs_url_patterns(gs_is_flux, monkeypatch, tmp_path, bucket):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", "http://127.0.0.1:9")  # the Hub is never reached
    fs = fsspec.filesystem("gs", skip_instance_cache=True, **gs_is_flux)
    fs.pipe({f"{bucket}/csv/{i}.csv": f"n\n{i}\n{i + 100}\n".encode() for i in range(20)})
    ds = datasets.load_dataset("csv", data_files=f"gs://{bucket}/csv/*.csv", split="train",
                               cache_dir=str(tmp_path), storage_options=gs_is_flux)
    assert sorted(ds["n"]) == sorted([i for i in range(20)] + [i + 100 for i in range(20)])


def test_registry_is_restored_after_the_tests_above():
    assert fsspec.get_filesystem_class("gs") is not FluxFileSystem


def test_register_gs_refuses_other_protocols():
    with pytest.raises(ValueError, match=r"FluxFileSystem opens gs:// and gcs:// URLs, not s3://"):
        fluxfs.register_gs(("s3",))
