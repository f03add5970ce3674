"""A final upload answer cut off on the way (the server stored the object, the client got half a JSON
body): the write confirms the stored object by size and crc32c instead of failing with a parse error."""
from __future__ import annotations

import pytest

from fluxfs.errors import FluxError
from fluxfs.gcs import bridge, http
from fluxfs.gcs.checksums import crc32c
from fluxfs.writes.single import answer_or_confirm
from tests.conftest import make_fs

from .util import COMPOSE_PART, OFF_PART, payload, temp_leftovers, write_in_pieces

CASES = {  # strategy -> (part size, the op whose final answer is cut)
    "resumable": (OFF_PART, "write"),        # the resumable session's final chunk
    "compose": (COMPOSE_PART, "compose"),  # the final compose
}


@pytest.mark.parametrize("multipart", sorted(CASES))
def test_cut_final_answer_is_confirmed(flux_server, bucket, multipart):
    part, op = CASES[multipart]
    fs = make_fs(flux_server, multipart=multipart, part_size=part)
    data = payload(3 * part + 11, seed=5)
    flux_server.configure(cut_replies=1, fail_ops=[op])
    with fs.open(f"{bucket}/obj", "wb") as f:
        write_in_pieces(f, data)
    assert flux_server.configure()["cut_replies"] == 0  # the answer was indeed cut
    assert f.object_info["size"] == len(data)
    assert f.generation == fs.info(f"{bucket}/obj")["generation"]
    assert fs.cat(f"{bucket}/obj") == data
    assert temp_leftovers(flux_server, bucket) == []


def test_cut_answer_to_a_single_upload(flux_server, bucket):
    """Objects smaller than one part go up in one request: its answer is confirmed the same way."""
    fs = make_fs(flux_server)
    flux_server.configure(cut_replies=1, fail_ops=["write"])
    info = fs.pipe_file(f"{bucket}/small", b"small object")
    assert flux_server.configure()["cut_replies"] == 0
    assert fs.cat(f"{bucket}/small") == b"small object"
    assert info is None or info.get("size") in (None, 12)


def test_unreadable_answer_without_the_object_is_a_clear_error(flux_server, bucket):
    """When the stored object is not what was sent, the unreadable answer is reported, naming the object."""
    fs = make_fs(flux_server)
    fs.pipe_file(f"{bucket}/other", b"someone else's bytes")
    cut = http.Response(200, {}, b'{"kind":"storage#object","na')
    with pytest.raises(FluxError, match=r"B/other: the answer to the final upload request was unreadable "
                                        r"\(JSONDecodeError: .*\), and .*/other does not hold the 4 bytes"
                       .replace("B/", f"{bucket}/")):
        bridge.run(fs, answer_or_confirm, fs.client, cut, bucket, "other", crc32c(b"mine"), 4, f"{bucket}/other")
