"""Object naming rules (cloud.google.com/storage/docs/objects#naming): what GCS refuses with 400, on every way in.

fake-gcs-server stores these names; only the fluxfs server is held to the rules here.
"""
from __future__ import annotations

import pytest

from .wire import assert_gcs_error, quote

BAD_NAMES = {
    "line feed": "a\nb",
    "carriage return": "a\rb",
    "crlf": "dos\r\nline",
    "dot": ".",
    "dot dot": "..",
    "acme challenge": ".well-known/acme-challenge/token",
}


@pytest.mark.parametrize("label", list(BAD_NAMES))
def test_json_uploads_refuse_invalid_names(fwire, bucket, label):
    name = BAD_NAMES[label]
    err = assert_gcs_error(fwire.upload_media(bucket, name, b"x"), 400)
    assert "Invalid object name" in err["message"]
    assert_gcs_error(fwire.upload_multipart(bucket, {"name": name}, b"x"), 400)
    assert fwire.list(bucket).json().get("items", []) == []


@pytest.mark.parametrize("label", ["line feed", "carriage return"])
def test_xml_put_refuses_line_breaks(fwire, bucket, label):
    r = fwire.request("PUT", f"/{bucket}/{quote(BAD_NAMES[label])}", body=b"x")
    assert r.status == 400, r
    assert b"Invalid object name" in r.body
    assert fwire.list(bucket).json().get("items", []) == []


def test_compose_and_copy_refuse_a_line_feed_in_the_destination(fwire, bucket):
    fwire.put(bucket, "src", b"x")
    assert_gcs_error(fwire.compose(bucket, "a\nb", ["src"]), 400)
    copy = fwire.request("POST", f"{fwire.obj_path(bucket, 'src')}/copyTo/b/{bucket}/o/{quote('a' + chr(10) + 'b')}")
    assert_gcs_error(copy, 400)
    assert [i["name"] for i in fwire.list(bucket).json()["items"]] == ["src"]


def test_names_gcs_allows_are_kept(fwire, bucket):
    """Tabs, other control characters, '#', '?', '[', '*' and a leading '.well-known/' are legal (if discouraged)."""
    for name in ["tab\there", "bell\x07", "a#b?c[d]*", ".well-known/other", "...", ".a"]:
        fwire.put(bucket, name, b"x")
    assert len(fwire.list(bucket).json()["items"]) == 6
