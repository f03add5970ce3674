"""JSON API uploads (/upload/storage/v1/b/B/o): media, multipart/related and resumable sessions.

Client-supplied md5/crc32c are checked before anything is stored; a resumable session keeps its
bytes until the declared total arrives (a status query never finalizes early).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import time
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import quote

from aiohttp import web

from .diskerr import disk_error, disk_writes, is_disk_error
from .errors import ServerError
from .json_request import base_url, json_body, meta_from, preconds, resource_reply
from .media import goog_hashes
from .objects import with_kms_key
from .preconditions import check_preconditions
from .related import split_file, split_multipart
from .replies import Reply
from .spool import Spooled, file_pieces, receive


def _client_hashes(meta: Dict[str, Any], headers) -> Tuple[Optional[str], Optional[str]]:
    sent = goog_hashes(headers)
    return sent.get("md5", meta.get("md5Hash")), sent.get("crc32c", meta.get("crc32c"))


class Resumable:
    """An in-progress resumable upload session: its bytes in memory (`buf`), or with a root in
    the session's file (`body`: path, size and running hashes, pending.py), never in memory."""

    __slots__ = ("bucket", "name", "meta", "buf", "body", "q", "created")

    def __init__(self, bucket: str, name: str, meta: Dict[str, Any], q: Dict[str, str], path: Optional[str] = None):
        self.bucket, self.name, self.meta, self.q = bucket, name, meta, q
        self.buf = bytearray() if path is None else None
        self.body = Spooled(path, md5=hashlib.md5()) if path is not None else None
        self.created = time.time()

    @property
    def size(self) -> int:
        return self.body.size if self.body is not None else len(self.buf)

    def saved(self) -> Dict[str, Any]:
        """What `pending` keeps of the session (its bytes go to a file of their own)."""
        return {"bucket": self.bucket, "name": self.name, "meta": self.meta, "q": self.q, "created": self.created}


def restore_sessions(srv) -> None:
    """Sessions saved under the server's root (``--root``), unless expired."""
    for uid, s, path in srv.pending.load_resumable(srv.profile.s["resumable_ttl_s"]):
        sess = Resumable(s["bucket"], s["name"], s["meta"], s["q"], path)
        for piece in file_pieces(path):  # its hashes, read back a MiB at a time
            sess.body.add(piece)
        sess.created = s["created"]
        srv.resumable[uid] = sess


async def _receive_chunk(srv, request, sess: Resumable, skip: int) -> Tuple[int, Any]:
    """Take a chunk's body, minus its first `skip` bytes (already received): (its length, what to
    commit). With a root the bytes go to the session's file as they arrive, fsynced; `commit` then
    holds the new size and hashes, and `rollback(sess)` cuts the file back."""
    if sess.body is None:
        data = await srv.body(request)
        return len(data), memoryview(data)[skip:]
    new = Spooled(sess.body.path, sess.body.size, sess.body.crc, sess.body.md5.copy())
    n = 0
    try:
        with open(new.path, "ab") as f:
            f.truncate(sess.body.size)  # bytes of a chunk never acknowledged (a crash, a refused chunk)
            async for chunk in srv.body_iter(request):
                n += len(chunk)
                if skip >= len(chunk):
                    skip -= len(chunk)
                    continue
                piece = memoryview(chunk)[skip:] if skip else chunk
                skip = 0
                f.write(piece)
                new.add(piece)
            f.flush()
            os.fsync(f.fileno())
    except BaseException as e:
        rollback(sess)
        if is_disk_error(e):
            await srv.drain(request)
            raise disk_error(e, f"{sess.bucket}/{sess.name}") from e
        raise
    return n, new


def rollback(sess: Resumable) -> None:
    """Cut the session's file back to the bytes acknowledged (frees what a refused chunk took)."""
    if sess.body is not None:
        try:
            os.truncate(sess.body.path, sess.body.size)
        except OSError:
            pass


def _commit(sess: Resumable, got: Any) -> None:
    if sess.body is not None:
        sess.body = got
    else:
        sess.buf += got


def _drop(srv, uid: str) -> None:
    if srv.resumable.pop(uid, None) is not None and srv.pending is not None:
        srv.pending.drop_resumable(uid)


def forget_sessions(srv, bucket: str) -> List[str]:
    """Drop every resumable session into `bucket` (what a restart without ``--root`` does); their names."""
    uids = [uid for uid, s in srv.resumable.items() if s.bucket == bucket]
    names = sorted(srv.resumable[uid].name for uid in uids)
    for uid in uids:
        _drop(srv, uid)
    return names


def _store_upload(srv, request, q, bucket, name, meta, data, status=200, keep_file: bool = False) -> Reply:
    """Store the upload; a spooled body's file is removed if that fails (unless `keep_file`: a session's)."""
    try:
        ctype, md, extra = meta_from(meta)
        extra = with_kms_key(extra, q.get("kmsKeyName"))
        md5, crc = _client_hashes(meta, request.headers)
        obj = srv.store.put(bucket, name, data, content_type=ctype, metadata=md, extra=extra, expect_md5=md5,
                            expect_crc=crc, preconditions=preconds(q))
    except BaseException:
        if data.__class__ is Spooled and not keep_file:
            data.discard()
        raise
    return resource_reply(request, q, obj, bucket, status)


async def _body(srv, request, bucket: str, what: str):
    """The body: bytes, or with a root a file written as it arrives (never whole in memory)."""
    where = srv.store.spool_dir(bucket)
    return await srv.body(request) if where is None else await receive(srv, request, where, what)


async def upload_start(srv, request: web.Request, q: Dict[str, str], bucket: str) -> Reply:
    srv.store.bucket(bucket)
    kind = q.get("uploadType", "media" if request.path.startswith("/upload/") else "json")
    if kind == "media":
        name = q.get("name")
        if not name:
            raise ServerError(400, "Upload requires the 'name' query parameter.", "required")
        data = await _body(srv, request, bucket, f"{bucket}/{name}")
        meta = {"contentType": request.headers.get("Content-Type") or None}
        if q.get("contentEncoding"):
            meta["contentEncoding"] = q["contentEncoding"]
        return _store_upload(srv, request, q, bucket, name, meta, data)
    if kind == "multipart":
        where = srv.store.spool_dir(bucket)
        if where is None:
            data = await srv.body(request)
            (h1, metaraw), (h2, media) = split_multipart(data, request.headers.get("Content-Type", ""))
        else:
            whole = await receive(srv, request, where, f"an upload into {bucket}", md5=False)
            try:
                h1, metaraw, h2, media = split_file(whole, request.headers.get("Content-Type", ""), where,
                                                    f"an upload into {bucket}")
            finally:
                whole.discard()
        try:
            meta = json.loads(metaraw) if metaraw.strip() else {}
            name = meta.get("name") or q.get("name")
            if not name:
                raise ServerError(400, "Upload requires an object name.", "required")
        except BaseException as e:
            if media.__class__ is Spooled:
                media.discard()
            if isinstance(e, ValueError):
                raise ServerError(400, "multipart upload metadata is not valid JSON.", "parseError") from None
            raise
        if not meta.get("contentType") and h2.get("content-type"):
            meta["contentType"] = h2["content-type"]
        return _store_upload(srv, request, q, bucket, name, meta, media)
    if kind == "resumable":
        meta = await json_body(srv, request)
        name = meta.get("name") or q.get("name")
        if not name:
            raise ServerError(400, "Upload requires an object name.", "required")
        if not meta.get("contentType") and request.headers.get("X-Upload-Content-Type"):
            meta["contentType"] = request.headers["X-Upload-Content-Type"]
        # Fail fast on preconditions (GCS checks them at initiation and again at finalization).
        check_preconditions(srv.store.peek(bucket, name), **preconds(q))
        uid = secrets.token_urlsafe(18)
        sess = Resumable(bucket, name, meta, q, srv.pending.resumable_data(uid) if srv.pending else None)
        if srv.pending is not None:
            with disk_writes(f"a resumable session for {bucket}/{name}"):
                srv.pending.start_resumable(uid, sess.saved())
        srv.resumable[uid] = sess
        loc = f"{base_url(request)}/upload/storage/v1/b/{quote(bucket, safe='')}/o?uploadType=resumable&upload_id={uid}"
        return Reply(200, b"", {"Location": loc, "X-GUploader-UploadID": uid, "Content-Type": "text/plain"})
    if kind == "json":  # metadata-only objects.insert: an empty object
        meta = await json_body(srv, request)
        name = meta.get("name") or q.get("name")
        if not name:
            raise ServerError(400, "Object name is required.", "required")
        return _store_upload(srv, request, q, bucket, name, meta, b"")
    raise ServerError(400, f"Unknown uploadType {kind!r}.", "invalid")


_RANGE_RE = re.compile(r"bytes\s+(?:(\d+)-(\d+)|\*)/(\d+|\*)$")


async def resumable_chunk(srv, request: web.Request, q: Dict[str, str], bucket: str) -> Reply:
    uid = q["upload_id"]
    sess = srv.resumable.get(uid)
    if sess is not None and time.time() - sess.created > srv.profile.s["resumable_ttl_s"]:
        _drop(srv, uid)  # GCS: a session URI expires a week after it was started
        sess = None
    if sess is None or sess.bucket != bucket:
        raise ServerError(404, f"No such resumable upload session: {uid}", "notFound")
    cr = request.headers.get("Content-Range")
    have = sess.size
    m = _RANGE_RE.match(cr.strip()) if cr is not None else None
    if cr is None or (m is not None and m.group(1) is not None):
        start, end = (0, None) if cr is None else (int(m.group(1)), int(m.group(2)))
        if (cr is None and have) or start > have:
            await srv.drain(request)
            raise ServerError(400, "Content-Range is required after the first chunk." if cr is None else
                              f"Chunk starts at {start} but only {have} bytes were received; resume at {have}.",
                              "invalid")
        n, got = await _receive_chunk(srv, request, sess, have - start)
        if end is not None and end - start + 1 != n:
            rollback(sess)
            raise ServerError(400, f"Content-Range {cr!r} does not match the {n}-byte body.", "invalid")
        total = None if cr is None else None if m.group(3) == "*" else int(m.group(3))
        size = sess.size + len(got) if sess.body is None else got.size
        if total is not None and size > total:
            rollback(sess)
            raise ServerError(400, f"Received {size} bytes, more than the declared {total}.", "invalid")
        _commit(sess, got)
        if cr is None or size == total:
            return _finish(srv, request, uid, sess)
        return _incomplete(size)
    if m is None:
        await srv.drain(request)
        raise ServerError(400, f"Invalid Content-Range {cr!r}", "invalid")
    total = None if m.group(3) == "*" else int(m.group(3))
    if await srv.body(request):  # status query ("bytes */N" or "bytes */*")
        raise ServerError(400, "Content-Range 'bytes */N' must not carry a body.", "invalid")
    if total is not None and total == have:
        return _finish(srv, request, uid, sess)  # GCS: an empty final request finalizes
    if total is not None and total < have:
        raise ServerError(400, f"Declared size {total} is less than the {have} bytes already received.")
    return _incomplete(have)


def _incomplete(n: int) -> Reply:
    h = {"Content-Type": "text/plain"}
    if n:
        h["Range"] = f"bytes=0-{n - 1}"
    return Reply(308, b"", h)


def _finish(srv, request, uid, sess) -> Reply:
    try:
        body = sess.body if sess.body is not None else bytes(sess.buf)
        reply = _store_upload(srv, request, sess.q, sess.bucket, sess.name, sess.meta, body, keep_file=True)
    except ServerError as e:
        if e.code in (400, 412):  # a failed final check ends the session, nothing stored
            _drop(srv, uid)
        raise
    _drop(srv, uid)
    return reply


async def resumable_cancel(srv, request: web.Request, q: Dict[str, str], bucket: str) -> Reply:
    if q["upload_id"] not in srv.resumable:
        raise ServerError(404, "No such resumable upload session.", "notFound")
    _drop(srv, q["upload_id"])
    return Reply(499, b"")
