"""A read-only role (objectViewer: the server's `read_only_token`, refused every write in GCS's words) with the default
options: batched reads try compose once, are refused 403, warn once and read directly from then on, for every later
batch and stream of the filesystem, with the right bytes and nothing left behind."""
from __future__ import annotations

import warnings

from google.oauth2.credentials import Credentials

from fluxfs import FluxFileSystem
from fluxfs.server.synthetic import synthetic_bytes
from tests.conftest import make_fs


def test_read_only_token_falls_back_to_direct_reads_once(flux_server, bucket):
    flux_server.generate(bucket, 300, size=(1, 300), prefix="r/")
    infos = [i for b in make_fs(flux_server).iter_objects(f"{bucket}/r") for i in b]
    expected = {i["name"]: synthetic_bytes(i["name"].partition("/")[2], i["size"]) for i in infos}
    flux_server.configure(read_only_token="viewer-token")
    fs = FluxFileSystem(endpoint_url=flux_server.url, token=Credentials("viewer-token"), skip_instance_cache=True)
    batches = [infos[i:i + 100] for i in range(0, len(infos), 100)]
    flux_server.reset_stats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = {}
        for batch in batches:  # three cat_objects calls, as a training loop's batches
            got.update(fs.cat_objects(batch))
        streamed = {}
        for part in fs.iter_cat_objects(infos, buffer_bytes=20_000):
            streamed.update(part)
    assert got == expected and streamed == expected
    said = [str(w.message) for w in caught if "compose" in str(w.message)]
    assert len(said) == 1, said
    assert "compose is not permitted" in said[0] and "does not have storage.objects.create access" in said[0]
    assert "viewer-token" not in said[0]
    st = flux_server.stats()
    # Only composes already in flight when the first 403 came back were sent; none after.
    assert 1 <= st["requests"].get("compose", 0) <= fs.batch_read_concurrency
    assert st["requests"].get("write", 0) == 0 and st["requests"].get("delete", 0) == 0
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []
