"""`fs.stats()`: the requests (by kind) and body bytes a filesystem sent, as the server counted them."""
from __future__ import annotations

import os

from tests.conftest import make_fs


def test_stats_match_the_servers_counts(flux_server, bucket):
    fs = make_fs(flux_server, part_size="5MiB", write_memory="64MiB")
    fs.ls(bucket)  # the session exists (and gcsfs's bucket lookups are done) before counting
    flux_server.reset_stats()
    fs.reset_stats()
    assert fs.stats() == {"requests": {}, "requests_total": 0, "bytes_read": 0, "bytes_written": 0}
    small = {f"{bucket}/s/{i:03d}": os.urandom(1000 + i) for i in range(64)}
    big = os.urandom(12 * 2**20 + 5)
    fs.pipe(small)                                # 64 single uploads
    fs.pipe(f"{bucket}/big", big)                 # XML multipart: initiate, parts, complete (and its record)
    assert fs.cat(list(small)) == small           # composites: compose, GET, delete
    assert fs.cat_file(f"{bucket}/big") == big    # ranged GETs
    fs.rm([f"{bucket}/s/000", f"{bucket}/s/001"])
    server, mine = flux_server.stats(), fs.stats()
    assert mine["requests"] == server["requests"]
    assert {"write", "compose", "read", "delete"} <= set(mine["requests"])
    assert mine["requests_total"] == sum(server["requests"].values())
    assert mine["bytes_written"] == server["bytes_in"] >= sum(map(len, small.values())) + len(big)
    assert mine["bytes_read"] == server["bytes_out"] >= sum(map(len, small.values())) + len(big)
    fs.reset_stats()
    assert fs.stats()["requests_total"] == 0
