"""The narrow client the filesystem hands its accelerations (`fs.client`): what the server refused is a
declared record, remembered by the filesystem and kept in a forked worker (the server is the same);
a filesystem built anew starts with an empty one."""
from __future__ import annotations

import dataclasses
import os
import warnings

from fluxfs.gcs.client import Client, ServerRefusals
from tests.conftest import make_fs
from tests.writes.util import XML_PART, payload


def test_refusals_are_a_declared_record():
    assert {f.name for f in dataclasses.fields(ServerRefusals)} == {
        "compose_denied", "xml_multipart_unsupported", "compose_component_probed", "compose_component_limit"}


def test_server_refusal_is_remembered_and_kept_after_fork(flux_server, bucket):
    flux_server.configure(xml_multipart=False)
    fs = make_fs(flux_server, part_size=XML_PART)
    assert isinstance(fs.client, Client) and fs.client.refused == ServerRefusals()
    data = payload(2 * XML_PART + 5, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # the one fallback warning
        fs.pipe_file(f"{bucket}/refused", data)
    assert fs.cat(f"{bucket}/refused") == data
    assert fs.client.refused == ServerRefusals(xml_multipart_unsupported=True)
    assert not hasattr(fs, "_xml_multipart_unsupported") and not hasattr(fs, "_compose_denied")
    parent_job = fs.client.job_id
    pid = os.fork()
    if pid == 0:  # a DataLoader worker: same server, same refusals; its own job id for temporaries
        ok = fs.client.refused.xml_multipart_unsupported and fs.client.job_id != parent_job
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert make_fs(flux_server, part_size=XML_PART).client.refused == ServerRefusals()
