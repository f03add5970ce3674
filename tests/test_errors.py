"""fluxfs.errors: the one-line message users see, from error bodies of every shape servers send."""
from __future__ import annotations

import json

import pytest

from fluxfs.errors import MAX_MESSAGE, HttpError, error_message, raise_for_status

GCS = {"error": {"code": 404, "message": "No such object: b/k",
                 "errors": [{"message": "No such object: b/k", "domain": "global", "reason": "notFound"}]}}

BODIES = {
    "gcs json": (GCS, "No such object: b/k"),
    "no errors[] or reason": ({"error": {"code": 404, "message": "No such object: b/k"}}, "No such object: b/k"),
    "only errors[]": ({"error": {"code": 403, "errors": [{"message": "denied"}]}}, "denied"),
    "json-encoded message": ({"error": {"code": 404, "message": json.dumps(GCS)}}, "No such object: b/k"),
    "json-encoded twice": ({"error": {"message": json.dumps({"error": {"message": json.dumps("deep")}})}}, "deep"),
    "message over lines": ({"error": {"code": 500, "message": "backend\n  failed\r\nretry"}}, "backend failed retry"),
    "error as a string": ({"error": "not found"}, "not found"),
    "oauth": ({"error": "invalid_grant", "error_description": "Bad Request"}, "invalid_grant: Bad Request"),
    "top-level message": ({"message": "bucket is gone"}, "bucket is gone"),
    "grpc status only": ({"error": {"code": 500, "status": "INTERNAL"}}, "INTERNAL"),
    "no message at all": ({"error": {"code": 403}}, ""),
    "a json string": ("just text", "just text"),
}


@pytest.mark.parametrize("label", list(BODIES))
def test_json_bodies(label):
    body, message = BODIES[label]
    assert error_message(json.dumps(body).encode()) == message


@pytest.mark.parametrize("body, message", [
    (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>NoSuchKey</Code><Message>The specified key does not "
     b"exist.</Message></Error>", "The specified key does not exist."),
    (b"<html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1></body></html>",
     "502 Bad Gateway"),
    (b"<p>upstream\nreset</p>", "upstream reset"),
    (b"Not Found\n", "Not Found"),
    (b"", ""),
    (b"{not json", "{not json"),
    (b"[1, 2]", "[1, 2]"),
    (b"\xff\xfe bad utf-8", "\ufffd\ufffd bad utf-8"),
])
def test_other_bodies(body, message):
    assert error_message(body) == message


def test_long_bodies_are_cut_to_one_line():
    msg = error_message(("trace line\n" * 500).encode())
    assert "\n" not in msg and len(msg) == MAX_MESSAGE and msg.endswith("...")


@pytest.mark.parametrize("status, exc", [(404, FileNotFoundError), (403, PermissionError), (400, HttpError)])
def test_raised_message_is_one_clean_line(status, exc):
    body = json.dumps({"error": {"code": status, "message": json.dumps({"error": {"message": "it\nbroke"}})}})
    with pytest.raises(exc) as info:
        raise_for_status(status, body.encode(), "b/k")
    assert str(info.value).endswith("b/k: it broke")
    with pytest.raises(exc) as bare:
        raise_for_status(status, b'{"error": {"code": %d}}' % status, "b/k")
    assert str(bare.value).endswith("b/k") and "{" not in str(bare.value)


def test_gcsfs_errors_map_to_fluxfs_types():
    """gcsfs's errors after its own retries (HttpError, bare OSError for 403, FileExistsError for 412, ProxyError for
    502) are the types fluxfs's own requests raise for the same status, naming the object."""
    import requests.exceptions
    from gcsfs.retry import HttpError as GcsfsHttpError

    from fluxfs.errors import PreconditionFailed, RetryableError, from_gcsfs

    for status in (429, 500, 503):
        exc = from_gcsfs(GcsfsHttpError({"code": status, "message": "backend busy"}), "b/k")
        assert type(exc) is RetryableError and exc.status == status and str(exc) == f"HTTP {status}: b/k: backend busy"
    exc = from_gcsfs(requests.exceptions.ProxyError(), "b/k")
    assert type(exc) is RetryableError and exc.status == 502
    exc = from_gcsfs(GcsfsHttpError({"code": 401, "message": "Invalid Credentials"}), "b/k")
    assert type(exc) is PermissionError and str(exc) == "Permission denied (HTTP 401) for b/k: Invalid Credentials"
    exc = from_gcsfs(OSError("Forbidden: b/o/k\nno access"), "b/k")
    assert type(exc) is PermissionError and str(exc) == "Permission denied (HTTP 403) for b/k: no access"
    assert type(from_gcsfs(FileExistsError("b/o/k"), "b/k")) is PreconditionFailed
    assert type(from_gcsfs(FileExistsError("b/o/k"), "b/k", create_only=True)) is FileExistsError
    assert from_gcsfs(FileNotFoundError("b/k"), "b/k") is None  # already the type fluxfs raises


def test_a_deeply_nested_error_body_is_shown_as_text():
    """A server's error body nested 100k deep made json.loads raise RecursionError instead of the HTTP error."""
    body = b'{"error": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(HttpError, match="HTTP 500: B/a: ") as err:
        raise_for_status(500, body, "B/a")
    assert len(str(err.value)) <= MAX_MESSAGE + 100


def test_deep_json_is_refused_before_the_parser_recurses():
    """'[[[[…' 100k deep is measured and refused before json.loads runs: hitting the recursion limit broke
    whatever else ran on that stack (finalizers raised RecursionError as unraisable exceptions). Nesting up
    to 128 levels, serde_json's limit (the safetensors package's parser), still parses."""
    import json

    from fluxfs import jsontext

    with pytest.raises(json.JSONDecodeError, match="nested too deeply to parse") as err:
        jsontext.loads(b"[" * 100_000 + b"]" * 100_000)
    assert err.value.__context__ is None  # no RecursionError was raised on the way
    assert jsontext.loads("[" * 128 + "]" * 128) is not None
    assert jsontext.loads(b'{"k": "[[[[' + b"[" * 500 + b'"}') == {"k": "[[[[" + "[" * 500}  # strings do not nest


def test_every_fluxfs_error_is_a_flux_error_keeping_its_builtin_base():
    """Every exception type fluxfs.errors exports is a FluxError (one `except FluxError` catches them all); the zonal
    ones keep the built-in base code already catches them by (NotImplementedError, TimeoutError, OSError)."""
    import fluxfs.errors as errors

    types = [getattr(errors, n) for n in errors.__all__
             if isinstance(getattr(errors, n), type) and not issubclass(getattr(errors, n), Warning)]
    assert len(types) >= 12 and all(issubclass(t, errors.FluxError) for t in types), types
    assert issubclass(errors.ZonalUnsupported, NotImplementedError)
    assert issubclass(errors.FolderRenameTimeout, TimeoutError)
    assert issubclass(errors.ResumeImpossible, OSError)


def test_errors_is_reached_from_the_package_alone():
    """`import fluxfs` then `fluxfs.errors.X` (as the README writes it), or `from fluxfs import errors`, in a fresh
    interpreter: the lazy attribute imported the module with `from . import errors`, which asked the package for
    the attribute again (RecursionError)."""
    import subprocess
    import sys

    for code in ("import fluxfs; print(fluxfs.errors.ObjectChanged.__name__)",
                 "from fluxfs import errors; print(errors.ObjectChanged.__name__)"):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and proc.stdout.strip() == "ObjectChanged", proc.stderr[-2000:]
