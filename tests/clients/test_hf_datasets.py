"""Hugging Face `datasets` over flux:// URLs, as its users call it: load_dataset with many data files.

`datasets` passes its own keywords through fsspec (``hf={...}``, the options of its Hub filesystem,
once it downloads more than 16 files); FluxFileSystem ignores what it does not take, as gcsfs does.
The Hub is never reached: the packaged builders (json, text, csv, imagefolder) read only the URLs
given, and the Hub endpoint is pointed at a closed port on this machine in case one tried.
"""
from __future__ import annotations

import csv
import io
import json
import warnings

import datasets  # the test extra installs it (setup.cfg): never skipped
import pytest

from fluxfs.errors import UnknownOptionWarning

from ..conftest import make_fs

FILES = 24  # more than the 16 files from which datasets downloads in batches, passing hf={...}


@pytest.fixture
def hf(monkeypatch, tmp_path, flux_server):
    """load_dataset with a cache in tmp_path, the Hub on a closed local port, any UnknownOptionWarning an error."""
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", "http://127.0.0.1:9")
    options = {"endpoint_url": flux_server.url, "token": "anon"}

    def load(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnknownOptionWarning)
            return datasets.load_dataset(*args, split="train", cache_dir=str(tmp_path / "hf"),
                                         storage_options=options, **kwargs)

    return load


def _rows(i: int) -> list[dict]:
    return [{"n": 2 * i + j, "text": f"file {i} row {j}"} for j in range(2)]


@pytest.mark.parametrize("kind", ["json", "csv", "text"])
def test_load_dataset_reads_many_flux_files(hf, flux_server, bucket, kind):
    fs = make_fs(flux_server)
    bodies = {}
    for i in range(FILES):
        rows = _rows(i)
        if kind == "json":
            body = "".join(json.dumps(r) + "\n" for r in rows)
        elif kind == "csv":
            out = io.StringIO()
            writer = csv.DictWriter(out, fieldnames=["n", "text"])
            writer.writeheader()
            writer.writerows(rows)
            body = out.getvalue()
        else:
            body = "".join(r["text"] + "\n" for r in rows)
        bodies[f"{bucket}/{kind}/{i:03d}.{kind if kind != 'text' else 'txt'}"] = body.encode()
    fs.pipe(bodies)
    ds = hf(kind, data_files=[f"flux://{key}" for key in sorted(bodies)])
    want = [r for i in range(FILES) for r in _rows(i)]
    if kind == "text":
        assert ds["text"] == [r["text"] for r in want]
    else:
        assert sorted(zip(ds["n"], ds["text"])) == [(r["n"], r["text"]) for r in want]


def test_imagefolder_over_flux(hf, flux_server, bucket):
    from PIL import Image

    def png(i: int) -> bytes:
        out = io.BytesIO()
        Image.new("RGB", (4, 3), (i, 2 * i, 3 * i)).save(out, format="PNG")
        return out.getvalue()

    fs = make_fs(flux_server)
    labels = {i: "cat" if i % 3 else "dog" for i in range(FILES)}
    fs.pipe({f"{bucket}/imgs/train/{labels[i]}/{i:03d}.png": png(i) for i in range(FILES)})
    ds = hf("imagefolder", data_files={"train": f"flux://{bucket}/imgs/train/**"})
    names = ds.features["label"].names
    got = sorted((row["image"].getpixel((0, 0))[0], names[row["label"]]) for row in ds)
    assert got == [(i, labels[i]) for i in range(FILES)]
