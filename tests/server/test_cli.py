"""`python -m fluxfs.server`: URL on the first stdout line, serves, stops cleanly on SIGTERM/SIGINT."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from fluxfs.server import run
from fluxfs.server.cli import add_arguments, settings_from

from tests.conftest import reap

from .raw import obj_path, request, upload

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _start(*flags):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "fluxfs.server", "--port", "0", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_cli_prints_url_and_stops_on_signal(sig):
    proc = _start("--fail-rate", "1", "--fail-ops", "write", "--fail-codes", "503")
    try:
        url = proc.stdout.readline().decode().strip()
        assert url.startswith("http://127.0.0.1:")
        assert request(url, "POST", "/storage/v1/b", b'{"name": "clib"}').status == 200
        assert upload(url, "clib", "a", b"1").status == 503  # the flags took effect
        proc.send_signal(sig)
        assert proc.wait(timeout=15) == 0
        assert proc.stdout.read() == b""  # the URL is the only thing printed on stdout
    finally:
        reap(proc)


def test_cli_rejects_bad_flags():
    proc = _start("--fail-ops", "bogus")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and out == b"" and b"unknown op" in err
    proc = _start("--link-mbps", "-1")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and out == b"" and err.strip() == b"fluxfs serve: link_mbps out of range: -1.0"


def test_add_arguments_for_fluxfs_serve():
    import argparse
    p = add_arguments(argparse.ArgumentParser())
    args = p.parse_args(["--profile", "cloud", "--latency-ms", "5", "--fail-codes", "429,503", "--seed", "3",
                         "--link-mbps", "200", "--read-only-token", "viewer"])
    assert settings_from(args) == {"profile": "cloud", "latency_ms": 5.0, "fail_codes": "429,503", "seed": 3,
                                   "link_mbps": 200.0, "read_only_token": "viewer"}


def test_subprocess_handle_same_api(tmp_path):
    with run(in_process=False, root=str(tmp_path), deny_ops={"delete"}) as srv:
        srv.generate("sub-b", 20, size=8, prefix="p/")
        assert srv.list_names("sub-b", "p/") == [f"p/{i:08d}" for i in range(20)]
        assert request(srv.url, "DELETE", obj_path("sub-b", "p/00000001")).status == 403
        assert srv.stats()["requests"] == {"delete": 1}
        proc = srv.process
    assert proc.poll() is not None  # closed with the context


@pytest.mark.slow
def test_subprocess_server_exits_when_parent_dies():
    """A crashed benchmark must not leave its server running."""
    code = ("import os; from fluxfs.server import run; s = run(in_process=False); "
            "print(s.process.pid, flush=True); os._exit(0)")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=60)
    pid = int(out.stdout.split()[0])
    import psutil
    try:
        psutil.Process(pid).wait(timeout=15)
    except psutil.NoSuchProcess:
        pass
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_cli_root_that_cannot_be_used_is_one_line(tmp_path):
    afile = tmp_path / "afile"
    afile.write_bytes(b"not a directory")
    proc = _start("--root", str(afile / "sub"))
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and out == b""
    assert err.decode().strip() == f"fluxfs serve: cannot use --root {afile / 'sub'}: Not a directory"
    assert afile.read_bytes() == b"not a directory"
