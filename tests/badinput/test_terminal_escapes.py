"""Object names holding terminal control sequences are printed escaped by every `fluxfs` command
(docs/bad-inputs.md, "Names that would drive the terminal")."""
from __future__ import annotations

import contextlib
import io

from fluxfs.cli import main
from fluxfs.gcs import tempnames

EVIL = "evil\x1b[2J\x1b]0;owned\x07\u202etxt.exe"   # clear screen, set the title, right-to-left override
SHOWN = "evil\\x1b[2J\\x1b]0;owned\\x07\\u202etxt.exe"


def _run(server, *argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--endpoint", server.url, *argv])
    return code, out.getvalue(), err.getvalue()


def _no_controls(text: str) -> None:
    assert not any(c in text for c in "\x1b\x07\u202e"), repr(text)


def test_listing_commands_escape_names(flux_server, bucket, fs):
    fs.pipe_file(f"{bucket}/dir/{EVIL}", b"x")
    fs.pipe_file(f"{bucket}/{EVIL}/inner", b"y")
    for argv in (["ls", f"flux://{bucket}/dir/"], ["ls", "-l", f"flux://{bucket}/dir/"], ["ls", f"flux://{bucket}/"],
                 ["ls", "-r", f"flux://{bucket}/"], ["du", f"flux://{bucket}/"]):
        code, out, err = _run(flux_server, *argv)
        assert code == 0, err
        _no_controls(out + err)
        assert SHOWN in out, (argv, out)


def test_error_messages_escape_names(flux_server, bucket, tmp_path):
    code, out, err = _run(flux_server, "cp", f"flux://{bucket}/{EVIL}", str(tmp_path / "x"))
    assert code == 3
    _no_controls(err)
    assert SHOWN in err, err


def test_cleanup_report_escapes_names(flux_server, bucket, fs):
    fs.pipe_file(f"{bucket}/{tempnames.TEMP_PREFIX}{EVIL}", b"mine")
    code, out, err = _run(flux_server, "cleanup", f"flux://{bucket}", "--older-than", "0")
    assert code == 0
    _no_controls(err)
    assert f"{bucket}/{tempnames.TEMP_PREFIX}{SHOWN}" in err
