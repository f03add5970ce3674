"""Bad-input catalogue: the local disk fills up while copying objects down (docs/bad-inputs.md).

Two ways to fill a disk without root mounts: a character device 1,7 (what /dev/full is: every
write fails with ENOSPC), made in the test's own directory (never the real /dev/full: a failed
download deletes its destination), and a per-process file-size limit (RLIMIT_FSIZE: writes past
it fail with EFBIG), which leaves a real directory to check for partial files.
"""
from __future__ import annotations

import errno
import os
import resource
import signal
import stat
import subprocess
import sys

import pytest

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB


def _full_device(tmp_path) -> str:
    path = str(tmp_path / "full")
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except PermissionError:
        pytest.skip("cannot create a character device here (needs CAP_MKNOD)")
    return path


def test_download_to_a_full_disk(fs, bucket, tmp_path):
    fs.pipe_file(f"{bucket}/data.bin", PAYLOAD)
    dest = _full_device(tmp_path)
    with pytest.raises(OSError) as info:
        fs.get_file(f"{bucket}/data.bin", dest)
    assert info.value.errno == errno.ENOSPC
    # The user must learn *where* the disk is full, not only that some disk is.
    assert dest in str(info.value)


def _limit_file_size():
    """In the child: writes past 64 KiB fail with EFBIG instead of killing it with SIGXFSZ."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))


def test_cli_copy_to_a_full_disk(flux_server, fs, bucket, tmp_path):
    fs.pipe_file(f"{bucket}/data.bin", PAYLOAD)
    out = tmp_path / "out"
    out.mkdir()
    dest = out / "data.bin"
    proc = subprocess.run([sys.executable, "-m", "fluxfs.cli", "cp", "-q", "--endpoint", flux_server.url,
                           f"flux://{bucket}/data.bin", str(dest)],
                          capture_output=True, text=True, timeout=120, preexec_fn=_limit_file_size)
    assert proc.returncode != 0
    assert os.listdir(out) == []  # no partial file, no temporary file
    assert "File too large" in proc.stderr and str(dest) in proc.stderr, proc.stderr


def test_get_file_to_a_full_disk_leaves_no_partial_file(flux_server, bucket, tmp_path, fs):
    fs.pipe_file(f"{bucket}/data.bin", PAYLOAD)
    out = tmp_path / "out"
    out.mkdir()
    dest = out / "data.bin"
    code = ("import sys; from fluxfs import FluxFileSystem as F; "
            "F(endpoint_url=sys.argv[1], token='anon').get_file(sys.argv[2], sys.argv[3])")
    proc = subprocess.run([sys.executable, "-c", code, flux_server.url, f"{bucket}/data.bin", str(dest)],
                          capture_output=True, text=True, timeout=120, preexec_fn=_limit_file_size)
    assert proc.returncode != 0
    assert "OSError: [Errno 27] File too large" in proc.stderr, proc.stderr[-2000:]
    assert os.listdir(out) == []
