"""HNS folders over the JSON API (`/storage/v1/b/B/folders`), through the HTTP session every other request
uses: what gcsfs asks the storage-control gRPC API (CreateFolder, GetFolder, ListFolders, DeleteFolder,
RenameFolder), with its errors: FileNotFoundError, FileExistsError, and OSError(ENOTEMPTY) naming the folder."""
from __future__ import annotations

import asyncio
import errno
import time
from typing import TYPE_CHECKING, Optional

from ..errors import FolderRenameTimeout, HttpError
from ..gcs import http

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

# A rename is a long-running operation: polled until done, for at most this long.
RENAME_DEADLINE = 600.0
_POLL_FIRST, _POLL_MAX = 0.05, 2.0


def folder_id(key: str) -> str:
    """A folder's name as GCS keeps it: the key with one trailing slash ("a/b" -> "a/b/")."""
    return key.rstrip("/") + "/"


def directory_entry(bucket: str, key: str, res: Optional[dict] = None) -> dict:
    """The info dict of a folder (gcsfs's `_create_folder_entry`), from a folder resource if given."""
    key = key.rstrip("/")
    entry = {"Key": key, "Size": 0, "name": f"{bucket}/{key}", "size": 0, "type": "directory",
             "storageClass": "DIRECTORY", "bucket": bucket}
    if res:
        entry.update(ctime=res.get("createTime"), mtime=res.get("updateTime"),
                     metageneration=res.get("metageneration"))
    return entry


async def create(client: "Client", bucket: str, key: str, recursive: bool) -> dict:
    """folders.insert; an existing folder is FileExistsError, a missing parent (not `recursive`) FileNotFoundError."""
    what = f"{bucket}/{folder_id(key)}"
    try:
        resp = await http.request_once(client, "POST", client.json_url("b/{}/folders", bucket), what=f"mkdir {what}",
                                       json={"name": folder_id(key)},
                                       params={"recursive": "true"} if recursive else None)
    except HttpError as exc:
        if exc.status == 409:
            raise FileExistsError(errno.EEXIST, f"folder already exists: {exc.message}", what) from None
        raise
    return resp.json()


async def get(client: "Client", bucket: str, key: str) -> dict:
    """folders.get: the folder resource; FileNotFoundError if there is no such folder."""
    what = f"{bucket}/{folder_id(key)}"
    resp = await http.request(client, "GET", client.json_url("b/{}/folders/{}", bucket, folder_id(key)), op="metadata",
                              what=what)
    return resp.json()


async def delete(client: "Client", bucket: str, key: str) -> None:
    """folders.delete of an empty folder; a non-empty one is OSError(ENOTEMPTY) naming it, as gcsfs raises OSError."""
    what = f"{bucket}/{folder_id(key)}"
    try:
        await http.request_once(client, "DELETE", client.json_url("b/{}/folders/{}", bucket, folder_id(key)),
                                what=f"rmdir {what}", ok=(200, 204))
    except HttpError as exc:
        if exc.status in (409, 412, 400) and "not empty" in exc.message.lower():
            raise OSError(errno.ENOTEMPTY, f"folder is not empty: {exc.message}", what) from None
        raise


async def list_all(client: "Client", bucket: str, prefix: str) -> list[dict]:
    """folders.list: every folder whose name starts with `prefix`, all pages."""
    out: list[dict] = []
    token = None
    while True:
        params = {"prefix": prefix} if prefix else {}
        if token:
            params["pageToken"] = token
        resp = await http.request(client, "GET", client.json_url("b/{}/folders", bucket), op="list",
                                  what=f"folders of {bucket}/{prefix}", params=params)
        page = resp.json()
        out.extend(page.get("items") or [])
        token = page.get("nextPageToken")
        if not token:
            return out


async def rename(client: "Client", bucket: str, src: str, dst: str, deadline: float | None = None) -> dict:
    """folders.rename (one atomic request), then its long-running operation polled until done (at most
    `deadline` s, default RENAME_DEADLINE). A missing source is FileNotFoundError, an existing destination
    FileExistsError."""
    what = f"{bucket}/{folder_id(src)} -> {bucket}/{folder_id(dst)}"
    url = client.json_url("b/{}/folders/{}/renameTo/folders/{}", bucket, folder_id(src), folder_id(dst))
    try:
        op = (await http.request_once(client, "POST", url, what=f"rename {what}")).json()
    except HttpError as exc:
        if exc.status == 409:
            raise FileExistsError(errno.EEXIST, f"cannot rename folder: {exc.message}",
                                  f"{bucket}/{folder_id(dst)}") from None
        raise
    deadline = RENAME_DEADLINE if deadline is None else deadline
    wait, start = _POLL_FIRST, time.monotonic()
    while not op.get("done"):
        if time.monotonic() - start > deadline:
            raise FolderRenameTimeout(f"rename {what}: operation {op.get('name')} not done after {deadline:g} s "
                                      "(it may still complete; check both folders)")
        await asyncio.sleep(wait)
        wait = min(wait * 2, _POLL_MAX)
        op_id = str(op.get("name", "")).rsplit("/", 1)[-1]
        op = (await http.request(client, "GET", client.json_url("b/{}/operations/{}", bucket, op_id), op="metadata",
                                 what=f"rename {what}")).json()
    if op.get("error"):
        err = op["error"]
        raise OSError(errno.EIO, f"rename {what} failed: {err.get('message', err)}")
    return op
