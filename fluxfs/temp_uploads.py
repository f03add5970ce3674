"""Unfinished XML multipart uploads: which are fluxfs's, listing them, aborting them.

GCS's ListMultipartUploads answer carries no metadata, so an upload cannot say who started it. fluxfs's
XML writer therefore keeps a *record* per upload: an empty temporary object
``<temp_prefix>multipart/<job>/<16 hex>``, created (create-only) right after the upload is initiated,
marked as the job's temporary and naming the upload (`RECORD_ID`, `RECORD_KEY` metadata); it is
deleted once the upload is completed or aborted. An upload with a marked record is fluxfs's; any
other (another tool's, still running) is listed but aborted only when asked (`abort_foreign`).
`fluxfs.temporaries` is the public face of this module.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional

from . import temp_registry
from .gcs import http, tempnames
from .gcs import xml as gcsxml
from .gcs.client import client_of
from .gcs.pager import list_pages
from .gcs.timestamps import parse_timestamp

if TYPE_CHECKING:  # pragma: no cover
    from .gcs.client import Client

RECORD_KIND = "multipart"
RECORD_ID = "fluxfs-upload-id"      # the record's metadata: the upload id it stands for
RECORD_KEY = "fluxfs-upload-key"    # ... and the key that upload writes


def record_key(client: "Client") -> str:
    """A fresh key for the record of one of this job's uploads."""
    client = client_of(client)
    return tempnames.temp_key(client.job_id, RECORD_KIND, client.options.temp_prefix)


def record_metadata(client: "Client", key: str, upload_id: str) -> dict[str, str]:
    """The custom metadata of an upload's record: the job's temporary marker, the upload id and key."""
    client = client_of(client)
    return {**tempnames.marker(client.job_id), RECORD_ID: upload_id, RECORD_KEY: key}


async def list_records(client: "Client", bucket: str) -> dict[tuple[str, str], tuple[str, str]]:
    """fluxfs's upload records in `bucket`: (key, upload id) -> (record "bucket/key", its generation)."""
    prefix = client.options.temp_prefix
    out: dict[tuple[str, str], tuple[str, str]] = {}
    async for page in list_pages(client, bucket, prefix=f"{prefix}{RECORD_KIND}/",
                                 fields="items(name,generation,metadata),nextPageToken"):
        for item in page.get("items", []):
            meta = item.get("metadata") or {}
            if tempnames.is_marked(item["name"], meta, prefix) and meta.get(RECORD_ID) and RECORD_KEY in meta:
                out[(meta[RECORD_KEY], meta[RECORD_ID])] = (f"{bucket}/{item['name']}", str(item.get("generation")))
    return out


async def list_incomplete_uploads(client: "Client", bucket: str, prefix: str = "") -> list[dict[str, Any]]:
    """In-progress XML multipart uploads of a bucket: [{"key", "upload_id", "initiated" (unix s), "fluxfs"
    (True: started by fluxfs, it has a marked record), "record" ((path, generation) or None)}]."""
    client = client_of(client)  # called with a filesystem too (tests, the CLI): its client
    return (await _scan(client, bucket, prefix))[0]


async def _scan(client: "Client", bucket: str, prefix: str
                ) -> tuple[list[dict[str, Any]], dict[tuple[str, str], tuple[str, str]]]:
    """The uploads under `prefix`, and fluxfs's records (listed first: a record is made after its upload
    starts, so each listed record's upload, if still open, is in the uploads listed)."""
    params: dict[str, str] = {"uploads": ""}
    if prefix:
        params["prefix"] = prefix
    records = await list_records(client, bucket)
    out: list[dict[str, Any]] = []
    while True:
        resp = await http.request(client, "GET", client.xml_url(bucket), op="list", what=bucket, params=params)
        root = gcsxml.children(resp.body)
        last_key = last_id = None
        for up in root:
            if gcsxml.local(up.tag) != "Upload":
                continue
            fields = gcsxml.fields(up)
            key, uid = fields.get("Key", ""), fields.get("UploadId", "")
            if key.startswith(prefix):
                record = records.get((key, uid))
                out.append({"key": key, "upload_id": uid,
                            "initiated": parse_timestamp(fields["Initiated"]).timestamp()
                            if fields.get("Initiated") else None,
                            "fluxfs": record is not None, "record": record})
            last_key, last_id = key, uid
        truncated = any(gcsxml.local(e.tag) == "IsTruncated" and (e.text or "").strip() == "true" for e in root)
        if not truncated or last_key is None:
            return out, records
        params.update({"key-marker": last_key, "upload-id-marker": last_id})


async def abort_upload(client: "Client", bucket: str, up: dict[str, Any]) -> bool:
    """Abort one listed upload (and delete its record); False when it was already gone."""
    try:
        await http.request(client, "DELETE", client.xml_url(bucket, up["key"]), op="delete",
                           what=f"{bucket}/{up['key']}", params={"uploadId": up["upload_id"]}, ok=(200, 204))
        gone = True
    except FileNotFoundError:
        gone = False
    if up.get("record"):
        await temp_registry.delete(client, *up["record"])
    return gone


def is_stale(up: dict[str, Any], older_than: float, now: Optional[float] = None) -> bool:
    """Whether an upload was started at least `older_than` seconds ago (an unknown start counts as old)."""
    return up["initiated"] is None or (now or time.time()) - up["initiated"] >= older_than


async def abort_incomplete_uploads(client: "Client", bucket: str, prefix: str = "",
                                   older_than: float = 0.0, abort_foreign: bool = False) -> list[str]:
    """Abort fluxfs's in-progress multipart uploads started more than `older_than` seconds ago (a killed
    writer's); returns the keys whose uploads were aborted. Uploads fluxfs did not start (no marked
    record: another tool may still be sending parts) are left alone unless `abort_foreign`."""
    client = client_of(client)  # called with a filesystem too (tests, the CLI): its client
    now = time.time()
    aborted = []
    uploads, records = await _scan(client, bucket, prefix)
    for up in uploads:
        if not is_stale(up, older_than, now) or not (up["fluxfs"] or abort_foreign):
            continue
        if await abort_upload(client, bucket, up):
            aborted.append(up["key"])
    await drop_orphan_records(client, prefix, uploads, records)
    return aborted


async def drop_orphan_records(client: "Client", prefix: str, uploads: list[dict[str, Any]],
                              records: dict[tuple[str, str], tuple[str, str]]) -> int:
    """Delete the records (of keys under `prefix`) whose upload is no longer open: completed, or aborted
    by a writer that could not delete its record (a server that stopped answering)."""
    open_ids = {(up["key"], up["upload_id"]) for up in uploads}
    gone = [rec for (key, uid), rec in records.items() if key.startswith(prefix) and (key, uid) not in open_ids]
    return sum([await temp_registry.delete(client, *rec) for rec in gone])
