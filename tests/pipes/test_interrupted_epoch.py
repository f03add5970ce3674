"""Ctrl-C during a training epoch leaves no temporary composite in the bucket.

Ctrl-C sends SIGINT to the whole process group: the main process and its DataLoader workers, each reading
batches through composites. Every worker stops its reads and deletes what it composed before it ends, also
when the main process's exit terminates it (SIGTERM) mid-cleanup. The server answers slowly once batches flow,
so composites are in flight when the interrupt lands and the cleanup is still going when SIGTERM comes.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests._sigint import bucket, server  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[2]
TEMP = "_fluxfs-tmp/"
KINDS = ["iter", "map", "iter"]  # caught twice (as in a notebook), then the script ends at the third


def _gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _ctrl_c_while_composing(server, bucket: str, proc: subprocess.Popen) -> None:  # noqa: F811 (fixtures)
    assert proc.stdout.readline().strip() == "READING", proc.stderr.read()
    server.configure(latency_ms=300)
    deadline = time.monotonic() + 30
    while not server.list_names(bucket, TEMP):  # composites exist: reads are in flight
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < deadline, "the epoch never composed"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the main process and its workers


def test_ctrl_c_mid_epoch_leaves_no_composites(server, bucket):  # noqa: F811 (fixtures)
    server.generate(bucket, 2000, size=1024, prefix="d/")
    proc = subprocess.Popen([sys.executable, "-m", "tests.pipes._interrupted_loader", server.url, bucket, *KINDS],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        for n, kind in enumerate(KINDS[:-1]):
            _ctrl_c_while_composing(server, bucket, proc)
            assert proc.stdout.readline().strip() == "INTERRUPTED", proc.stderr.read()  # its workers ended
            server.configure(latency_ms=0)
            assert server.list_names(bucket, TEMP) == [], f"interrupt {n + 1} ({kind}) left composites"
        _ctrl_c_while_composing(server, bucket, proc)
        proc.wait(60)
        deadline = time.monotonic() + 60
        while not _gone(proc.pid):  # workers end once they have cleaned up
            assert time.monotonic() < deadline, "DataLoader workers outlived the interrupt by 60 s"
            time.sleep(0.05)
        server.configure(latency_ms=0)
        assert server.list_names(bucket, TEMP) == [], "the interrupt that ended the script left composites"
    finally:
        if not _gone(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        server.configure(latency_ms=0)
