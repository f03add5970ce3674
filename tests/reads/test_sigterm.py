"""SIGTERM mid-read, once `temporaries.clean_up_on_sigterm()` is set: the composites in flight are deleted, then
the process ends by SIGTERM as it would have (a plain SIGTERM runs no cleanup: they stayed)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests._sigint import bucket, server  # noqa: F401 (fixtures)
from tests.conftest import reap

ROOT = Path(__file__).resolve().parents[2]
TEMP = "_fluxfs-tmp/"

# Reads batches of small objects through composites on a thread (as a DataLoader worker's prefetch does).
CHILD = """
import sys, threading
from fluxfs import FluxFileSystem
from fluxfs.temporaries import clean_up_on_sigterm

clean_up_on_sigterm()
fs = FluxFileSystem(endpoint_url=sys.argv[1], token="anon")
infos = fs.find(sys.argv[2] + "/d/", detail=True)

def read():
    while True:
        fs.cat_objects(list(infos.values()))

threading.Thread(target=read, daemon=True).start()
print("READING", flush=True)
threading.Event().wait()
"""


def test_sigterm_mid_read_deletes_the_composites_then_ends_the_process(server, bucket):  # noqa: F811
    server.generate(bucket, 256, size=1024, prefix="d/")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, server.url, bucket], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "READING", proc.stderr.read()
        server.configure(latency_ms=300)
        deadline = time.monotonic() + 30
        while not server.list_names(bucket, TEMP):  # composites exist: a compose answered, its read is on
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "no composite appeared"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == -signal.SIGTERM, proc.stderr.read()
    finally:
        reap(proc)
        server.configure(latency_ms=0)
    assert server.list_names(bucket, TEMP) == []
