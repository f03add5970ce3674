"""Bad-input catalogue: storage options spelled either way, twice, or not at all known (docs/bad-inputs.md).

Everything in fluxfs.pipes takes ``storage_options={...}`` and keyword options alike (merged);
`FluxFileSystem` ignores keyword arguments it does not know, as gcsfs does (libraries such as Hugging Face
`datasets` pass their own through fsspec), warning about each one but another filesystem's options;
``storage_options=`` itself stays an error, and so do unknown keywords given to fluxfs.pipes or `-o`.
"""
from __future__ import annotations

import warnings

import fsspec
import pytest

from fluxfs import FluxFileSystem
from fluxfs.errors import UnknownOptionWarning


def test_filesystem_refuses_storage_options_as_an_argument(flux_server):
    with pytest.raises(TypeError, match=r"^FluxFileSystem got unexpected keyword argument\(s\) 'storage_options'"):
        FluxFileSystem(endpoint_url=flux_server.url, token="anon", skip_instance_cache=True,
                       storage_options={"endpoint_url": flux_server.url})
    with pytest.raises(TypeError, match="'storage_options'"):
        fsspec.filesystem("flux", storage_options={"endpoint_url": flux_server.url}, skip_instance_cache=True)


def test_filesystem_ignores_an_unknown_option_with_a_warning_naming_it(flux_server, bucket):
    with pytest.warns(UnknownOptionWarning) as caught:
        fs = FluxFileSystem(endpoint=flux_server.url, part_sise=2**20, colour="red", endpoint_url=flux_server.url,
                            token="anon", skip_instance_cache=True)
    assert sorted(str(w.message) for w in caught) == [
        "FluxFileSystem ignores unknown keyword argument 'colour': not an option of fluxfs, gcsfs or fsspec "
        "(fluxfs's: see fluxfs.options.FluxOptions)",
        "FluxFileSystem ignores unknown keyword argument 'endpoint' (did you mean 'endpoint_url'?): not an option "
        "of fluxfs, gcsfs or fsspec (fluxfs's: see fluxfs.options.FluxOptions)",
        "FluxFileSystem ignores unknown keyword argument 'part_sise' (did you mean 'part_size'?): not an option "
        "of fluxfs, gcsfs or fsspec (fluxfs's: see fluxfs.options.FluxOptions)"]
    assert fs.options.part_size == 8 * 2**20
    fs.pipe(f"{bucket}/a", b"one")
    assert fs.cat(f"{bucket}/a") == b"one"
    with warnings.catch_warnings():  # as a user who wants typos to fail would set it
        warnings.simplefilter("error", UnknownOptionWarning)
        with pytest.raises(UnknownOptionWarning, match="'part_sise' \\(did you mean 'part_size'\\?\\)"):
            FluxFileSystem(endpoint_url=flux_server.url, token="anon", skip_instance_cache=True, part_sise=1)


def test_another_filesystems_options_are_ignored_quietly(flux_server, bucket, caplog):
    """fsspec addresses the filesystems of a chained URL by protocol name (`hf={...}` from datasets)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownOptionWarning)
        with caplog.at_level("DEBUG", logger="fluxfs.options"):
            fs, path = fsspec.url_to_fs(f"flux://{bucket}/a", endpoint_url=flux_server.url, token="anon",
                                        hf={"endpoint": "https://hub", "token": None}, s3={"anon": True},
                                        skip_instance_cache=True)
    fs.pipe(path, b"x")
    assert fs.cat(path) == b"x"
    assert "FluxFileSystem ignores 'hf': the options of another filesystem of a chained URL" in caplog.text
    assert fs.storage_options["hf"] == {"endpoint": "https://hub", "token": None}  # kept for pickling


def test_filesystem_keeps_gcsfs_and_fsspec_options(flux_server):
    fs = FluxFileSystem(endpoint_url=flux_server.url, token="anon", skip_instance_cache=True, project="p",
                        consistency="none", cache_timeout=5, requester_pays=False, use_listings_cache=True,
                        listings_expiry_time=10, version_aware=False, asynchronous=False, loop=None)
    assert fs.project == "p"


def test_checkpoint_takes_storage_options_as_a_dict(flux_server, bucket):
    import torch

    from fluxfs.pipes import FluxCheckpoint

    ck = FluxCheckpoint(storage_options={"endpoint_url": flux_server.url, "token": "anon"})
    ck.save({"w": torch.arange(4)}, f"flux://{bucket}/model.pt")
    assert flux_server.list_names(bucket) == ["model.pt"]
    assert torch.equal(ck.load(f"flux://{bucket}/model.pt")["w"], torch.arange(4))
    both = FluxCheckpoint(storage_options={"endpoint_url": flux_server.url}, token="anon", part_size=6 * 2**20)
    assert both.storage_options == {"endpoint_url": flux_server.url, "token": "anon", "part_size": 6 * 2**20}
    assert torch.equal(both.load(f"flux://{bucket}/model.pt")["w"], torch.arange(4))


def test_an_option_given_twice_with_different_values_is_refused(flux_server):
    from fluxfs.pipes import FluxCheckpoint, FluxIterableDataset, ListObjects

    message = (r"storage option\(s\) 'endpoint_url' given twice with different values, in storage_options= "
               r"and as keyword arguments; give each once")
    with pytest.raises(TypeError, match="^FluxCheckpoint: " + message):
        FluxCheckpoint(storage_options={"endpoint_url": flux_server.url}, endpoint_url="http://127.0.0.1:9")
    with pytest.raises(TypeError, match="^FluxIterableDataset: " + message):
        FluxIterableDataset.from_prefix("flux://b/p/", storage_options={"endpoint_url": flux_server.url},
                                        endpoint_url="http://127.0.0.1:9")
    with pytest.raises(TypeError, match="^ListObjects: " + message):
        ListObjects("flux://b/p/", storage_options={"endpoint_url": flux_server.url},
                    endpoint_url="http://127.0.0.1:9")
    # The same value both ways is no conflict.
    FluxCheckpoint(storage_options={"endpoint_url": flux_server.url, "token": "anon"}, token="anon")


def test_pipes_take_keyword_options(flux_server, bucket, storage_options):
    from fluxfs.pipes import FluxIterableDataset, FluxMapDataset, ListObjects, ReadObjects
    from fluxfs.pipes.dcp import FluxStorageReader, FluxStorageWriter

    fs = FluxFileSystem(**storage_options)
    fs.pipe({f"{bucket}/d/1": b"one", f"{bucket}/d/2": b"two"})
    url = f"flux://{bucket}/d/"
    want = [("d/1", b"one"), ("d/2", b"two")]
    ds = FluxMapDataset.from_prefix(url, transform=None, **storage_options)
    assert [ds[0], ds[1]] == want
    assert list(FluxIterableDataset.from_prefix(url, shuffle=False, seed=3, **storage_options)) == want
    assert list(FluxIterableDataset(url, **storage_options)) == want
    assert FluxMapDataset.from_objects([url + "1"], **storage_options)[0] == want[0]
    assert list(ReadObjects(ListObjects(url, **storage_options), **storage_options)) == want
    writer = FluxStorageWriter(f"flux://{bucket}/ckpt", storage_options=storage_options)
    reader = FluxStorageReader(f"flux://{bucket}/ckpt", **storage_options)
    assert writer.fs.storage_options == reader.fs.storage_options == storage_options


def test_a_misspelled_dataset_argument_is_named(flux_server, storage_options):
    """Keywords given to fluxfs.pipes are refused when no filesystem takes them: the pipes are fluxfs's own API."""
    from fluxfs.pipes import FluxIterableDataset, ListObjects

    with pytest.raises(TypeError, match=r"^FluxIterableDataset got unexpected keyword argument\(s\) 'shufle': "):
        FluxIterableDataset.from_prefix("flux://b/p/", shufle=True, storage_options=storage_options)
    with pytest.raises(TypeError, match=r"^ListObjects got unexpected keyword argument\(s\) 'part_sise' "
                                        r"\(did you mean 'part_size'\?\)"):
        ListObjects("flux://b/p/", part_sise=2**20, storage_options=storage_options)


def test_the_constructor_takes_exactly_the_fields_of_flux_options(flux_server):
    """Options are defined once (FluxOptions); the constructor's keywords, signature and docstring follow them."""
    import dataclasses
    import inspect

    from fluxfs.options import FluxOptions

    fields = [f.name for f in dataclasses.fields(FluxOptions)]
    for sig in (inspect.signature(FluxFileSystem), inspect.signature(FluxFileSystem.__init__)):
        kw_only = [n for n, p in sig.parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY]
        assert kw_only == fields
        assert all(sig.parameters[n].default is None for n in fields)
    assert all(f"    {name}: " in FluxFileSystem.__init__.__doc__ for name in fields)
    # Every option given explicitly (as its default, or a value) reaches fs.options.
    defaults = {f.name: getattr(FluxOptions(), f.name) for f in dataclasses.fields(FluxOptions)}
    fs = FluxFileSystem(endpoint_url=flux_server.url, token="anon", skip_instance_cache=True,
                        **{**defaults, "job_id": "j1", "list_page_size": "7", "write_memory": "1GiB"})
    assert fs.options == FluxOptions(**{**defaults, "job_id": "j1", "list_page_size": 7, "write_memory": 2**30})
    assert fs.storage_options["list_page_size"] == "7"  # what fsspec pickles and re-builds from
    with pytest.warns(UnknownOptionWarning, match=r"'list_pagesize' \(did you mean 'list_page_size'\?\)"):
        FluxFileSystem(endpoint_url=flux_server.url, token="anon", skip_instance_cache=True, list_pagesize=7)
