"""GCS XML API: GET/HEAD/PUT/DELETE /BUCKET/OBJECT, bucket listing, and the XML multipart upload
(initiate, upload part, list parts, complete, abort; list uploads) used by transfer_manager."""
from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
import xml.etree.ElementTree as ET
from functools import partial
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple
from urllib.parse import unquote
from xml.sax.saxutils import escape


from aiohttp import web

from ..gcs.checksums import crc32c_combine, crc_to_b64, extend
from ..gcs.chunks import Chunked
from ..gcs.xml import local
from .copies import put_copy
from .diskerr import disk_writes
from .errors import ServerError
from .layout import refuse_zonal_copy
from .media import goog_hashes, hash_header, media_reply, object_etag
from .objects import XML_FIELD_HEADERS, b64, with_kms_key
from .preconditions import check_preconditions
from .replies import Reply
from .spool import Spooled, assemble, file_pieces, receive
from .timestamps import rfc3339

_NS = " xmlns='http://s3.amazonaws.com/doc/2006-03-01/'"
_XML = {"Content-Type": "application/xml; charset=UTF-8"}


def _xml(body: str, status: int = 200, headers: Optional[Dict[str, str]] = None) -> Reply:
    h = dict(_XML)
    if headers:
        h.update(headers)
    return Reply(status, ("<?xml version='1.0' encoding='UTF-8'?>" + body).encode(), h)


def _e(v) -> str:
    return escape(str(v))


class Part(NamedTuple):
    """One uploaded part, kept as the chunks it arrived in (the completed object keeps them too)."""

    chunks: list
    size: int
    etag: str      # hex MD5, as GCS answers
    uploaded: float
    crc: int       # its crc32c: the object's is derived from its parts' at completion
    path: Optional[str] = None  # with a root: the part's file (chunks then empty)


class Multipart:
    """An in-progress XML multipart upload."""

    __slots__ = ("bucket", "key", "parts", "content_type", "metadata", "extra", "created")

    def __init__(self, bucket: str, key: str, content_type: Optional[str], metadata: Dict[str, str],
                 extra: Dict[str, Any]):
        self.bucket, self.key = bucket, key
        self.parts: Dict[int, Part] = {}
        self.content_type, self.metadata, self.extra = content_type, metadata, extra
        self.created = time.time()

    def saved(self) -> Dict[str, Any]:
        """What `pending` keeps of the upload (its parts are files of their own)."""
        return {"bucket": self.bucket, "key": self.key, "content_type": self.content_type,
                "metadata": self.metadata, "extra": self.extra, "created": self.created}


def restore_uploads(srv) -> None:
    """Multipart uploads saved under the server's root (``--root``), with their parts."""
    for uid, u, parts in srv.pending.load_multipart():
        up = Multipart(u["bucket"], u["key"], u["content_type"], u["metadata"], u["extra"])
        up.created = u["created"]
        for n, (p, path) in parts.items():
            up.parts[n] = Part([], p["size"], p["etag"], p["uploaded"], p["crc"], path)
        srv.multipart[uid] = up


def _forget(srv, uid: str) -> None:
    """The upload is completed or aborted: gone from memory and from disk."""
    if srv.multipart.pop(uid, None) is not None and srv.pending is not None:
        srv.pending.drop_multipart(uid)


def route(method: str, path: str, q: Dict[str, str]) -> Tuple[str, Callable[..., Any]]:
    """Map (method, raw path) to (op name, handler)."""
    bucket_raw, _, key_raw = path[1:].partition("/")
    bucket = unquote(bucket_raw)
    if not bucket:
        raise ServerError(404, "Listing all buckets is not supported on the XML API.", xml_code="NotImplemented")
    if not key_raw:
        if method == "GET" and "uploads" in q:
            return "list", partial(list_uploads, bucket=bucket)
        if method == "GET":
            return "list", partial(list_objects, bucket=bucket)
        if method == "HEAD":
            return "bucket", partial(head_bucket, bucket=bucket)
        raise ServerError(405, f"Method not allowed: {method} on a bucket", xml_code="MethodNotAllowed")
    key = unquote(key_raw, errors="surrogateescape")
    if "uploadId" in q:
        if method == "PUT":
            return "write", partial(upload_part, bucket=bucket, key=key)
        if method == "POST":
            return "write", partial(complete, bucket=bucket, key=key)
        if method == "DELETE":
            return "write", partial(abort, bucket=bucket, key=key)
        if method == "GET":
            return "list", partial(list_parts, bucket=bucket, key=key)
    if method == "POST" and "uploads" in q:
        return "write", partial(initiate, bucket=bucket, key=key)
    if method in ("GET", "HEAD"):
        return "read", partial(get_object, bucket=bucket, key=key)
    if method == "PUT":
        return "write", partial(put_object, bucket=bucket, key=key)
    if method == "DELETE":
        return "delete", partial(delete_object, bucket=bucket, key=key)
    raise ServerError(405, f"Method not allowed: {method}", xml_code="MethodNotAllowed")


def _gen(v: Optional[str], what: str) -> Optional[int]:
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ServerError(400, f"Invalid {what}: {v!r}") from None


def _preconds(request) -> Dict[str, Optional[int]]:
    h = request.headers
    return {"if_gen": _gen(h.get("x-goog-if-generation-match"), "x-goog-if-generation-match"),
            "if_meta": _gen(h.get("x-goog-if-metageneration-match"), "x-goog-if-metageneration-match")}


def _meta_headers(request) -> Dict[str, str]:
    return {k[len("x-goog-meta-"):]: v for k, v in request.headers.items() if k.lower().startswith("x-goog-meta-")}


def _field_headers(request) -> Dict[str, Any]:
    """The resource fields set by headers (Cache-Control, Content-Disposition, ..., the KMS key)."""
    h = request.headers
    extra = {field: h[name] for name, field in XML_FIELD_HEADERS.items() if h.get(name)}
    return with_kms_key(extra, h.get("x-goog-encryption-kms-key-name"))


def _client_hashes(request):
    """(md5 b64, crc32c b64) from Content-MD5 and x-goog-hash headers."""
    sent = goog_hashes(request.headers)
    return sent.get("md5", request.headers.get("Content-MD5")), sent.get("crc32c")


async def get_object(srv, request: web.Request, q: Dict[str, str], bucket: str, key: str) -> Reply:
    obj = srv.store.get(bucket, key, _gen(q.get("generation"), "generation"))
    check_preconditions(obj, **_preconds(request), read=True)
    return media_reply(request, obj)


async def put_object(srv, request: web.Request, q: Dict[str, str], bucket: str, key: str) -> Reply:
    if request.headers.get("x-goog-copy-source"):
        src_b, _, src_k = unquote(request.headers["x-goog-copy-source"].lstrip("/")).partition("/")
        refuse_zonal_copy("Copy", {b: srv.store.bucket(b).zonal for b in (src_b, bucket)})
        src = srv.store.get(src_b, src_k)
        await srv.body(request)
        obj = put_copy(srv, bucket, key, [src], content_type=src.content_type, metadata=src.metadata,
                       component_count=src.component_count, preconditions=_preconds(request))
        return _xml(f"<CopyObjectResult{_NS}><LastModified>{rfc3339(obj.updated)}</LastModified>"
                    f"<ETag>\"{object_etag(obj)}\"</ETag></CopyObjectResult>", headers=_gen_headers(obj))
    where = srv.store.spool_dir(bucket)
    data = await srv.body(request) if where is None else await receive(srv, request, where, f"{bucket}/{key}")
    md5, crc = _client_hashes(request)
    try:
        obj = srv.store.put(bucket, key, data, content_type=request.headers.get("Content-Type"),
                            metadata=_meta_headers(request), extra=_field_headers(request), expect_md5=md5,
                            expect_crc=crc, preconditions=_preconds(request))
    finally:
        if data.__class__ is Spooled:
            data.discard()  # renamed into place if stored
    return Reply(200, b"", {"ETag": f'"{object_etag(obj)}"', **_gen_headers(obj)})


def _gen_headers(obj) -> Dict[str, str]:
    h = {"x-goog-generation": str(obj.generation), "x-goog-metageneration": str(obj.metageneration),
         "x-goog-hash": hash_header(obj)}
    return h


async def delete_object(srv, request: web.Request, q: Dict[str, str], bucket: str, key: str) -> Reply:
    srv.store.delete(bucket, key, _gen(q.get("generation"), "generation"), _preconds(request))
    return Reply(204, b"")


async def head_bucket(srv, request: web.Request, q: Dict[str, str], bucket: str) -> Reply:
    srv.store.bucket(bucket)
    return Reply(200, b"")


async def list_objects(srv, request: web.Request, q: Dict[str, str], bucket: str) -> Reply:
    mk = _gen(q.get("max-keys"), "max-keys")
    mk = 1000 if mk is None or mk <= 0 else min(mk, 1000)
    prefix, delim = q.get("prefix", ""), q.get("delimiter", "")
    marker = q.get("marker", "")
    resume = marker + "\x00" if marker else ""  # marker is exclusive
    objs, prefixes, nxt = srv.store.list(bucket, prefix=prefix, delimiter=delim, resume=resume, max_results=mk)
    parts = [f"<ListBucketResult{_NS}><Name>{_e(bucket)}</Name>"
             f"<Prefix>{_e(prefix)}</Prefix><Marker>{_e(marker)}</Marker>"
             f"<IsTruncated>{'true' if nxt is not None else 'false'}</IsTruncated>"]
    last = ""
    for o in objs:
        parts.append(f"<Contents><Key>{_e(o.name)}</Key><Generation>{o.generation}</Generation>"
                     f"<LastModified>{rfc3339(o.updated)}</LastModified><Size>{o.size}</Size></Contents>")
        last = o.name
    for p in prefixes:
        parts.append(f"<CommonPrefixes><Prefix>{_e(p)}</Prefix></CommonPrefixes>")
        last = max(last, p)
    if nxt is not None:
        parts.append(f"<NextMarker>{_e(last)}</NextMarker>")
    parts.append("</ListBucketResult>")
    return _xml("".join(parts))


# ---------------------------------------------------------------- multipart
# Parts from this size on are hashed on a worker thread (below it the hand-off costs more).
_HASH_IN_THREAD = 1 << 20


def _part_hashes(chunks: list):
    """(md5 digest, crc32c int) of one part's chunks: the ETag GCS returns for a part is its MD5."""
    md5, crc = hashlib.md5(), 0
    for c in chunks:
        md5.update(c)
        crc = extend(crc, c)
    return md5.digest(), crc


def _upload(srv, q, bucket, key) -> Multipart:
    up = srv.multipart.get(q["uploadId"])
    if up is None or up.bucket != bucket or up.key != key:
        raise ServerError(404, f"The specified multipart upload does not exist: {q['uploadId']}",
                          xml_code="NoSuchUpload")
    return up


async def initiate(srv, request: web.Request, q: Dict[str, str], bucket: str, key: str) -> Reply:
    if not srv.profile.s["xml_multipart"]:  # a server without XML multipart upload (configure(xml_multipart=False))
        raise ServerError(501, "XML multipart upload is not implemented by this server.", xml_code="NotImplemented")
    srv.store.bucket(bucket)
    await srv.body(request)
    uid = secrets.token_urlsafe(24)
    up = Multipart(bucket, key, request.headers.get("Content-Type"), _meta_headers(request), _field_headers(request))
    if srv.pending is not None:
        with disk_writes(f"a multipart upload of {bucket}/{key}"):
            srv.pending.start_multipart(uid, up.saved())
    srv.multipart[uid] = up
    return _xml(f"<InitiateMultipartUploadResult{_NS}><Bucket>{_e(bucket)}</Bucket><Key>{_e(key)}</Key>"
                f"<UploadId>{uid}</UploadId></InitiateMultipartUploadResult>")


async def upload_part(srv, request: web.Request, q: Dict[str, str], bucket: str, key: str) -> Reply:
    up = _upload(srv, q, bucket, key)
    n = _gen(q.get("partNumber"), "partNumber")
    limit = srv.profile.s["max_parts"]  # XML_MAX_PARTS unless a test lowers it
    if n is None or not 1 <= n <= limit:
        raise ServerError(400, f"partNumber must be between 1 and {limit}, got {q.get('partNumber')!r}.")
    if srv.pending is not None:  # on disk as it arrives, fsynced before it is acknowledged
        return await _part_to_disk(srv, request, q, up, n)
    # Kept as received, unjoined: the completed object is made of these chunks (`Chunked`).
    chunks = await srv.body_chunks(request)
    size = sum(map(len, chunks))
    if size >= _HASH_IN_THREAD:
        # md5 runs at ~0.5 GB/s and releases the GIL: hashed on a worker thread, an 8 MiB part no
        # longer stalls the event loop (and every other part's paced body) for ~20 ms.
        md5raw, crc_int = await asyncio.get_running_loop().run_in_executor(None, _part_hashes, chunks)
    else:
        md5raw, crc_int = _part_hashes(chunks)
    _check_part(request, md5raw, crc_int)
    part = Part(chunks, size, md5raw.hex(), time.time(), crc_int)
    up.parts[n] = part
    return _part_reply(md5raw, crc_int)


def _check_part(request, md5raw: bytes, crc_int: int) -> None:
    want_md5, want_crc = _client_hashes(request)
    if want_md5 is not None and want_md5 != b64(md5raw):
        raise ServerError(400, "The Content-MD5 you specified did not match what we received.", xml_code="BadDigest")
    if want_crc is not None and want_crc != crc_to_b64(crc_int):
        raise ServerError(400, "The crc32c you specified did not match what we received.", xml_code="BadDigest")


def _part_reply(md5raw: bytes, crc_int: int) -> Reply:
    return Reply(200, b"", {"ETag": f'"{md5raw.hex()}"',
                            "x-goog-hash": f"crc32c={crc_to_b64(crc_int)},md5={b64(md5raw)}"})


async def _part_to_disk(srv, request, q, up: Multipart, n: int) -> Reply:
    """A part with a root: received into a file of the upload's (hashed as it arrives), then its record."""
    what = f"part {n} of {up.bucket}/{up.key}"
    sp = await receive(srv, request, srv.pending.part_dir(q["uploadId"]), what)
    try:
        md5raw = sp.md5.digest()
        _check_part(request, md5raw, sp.crc)
        record = {"size": sp.size, "etag": md5raw.hex(), "uploaded": time.time(), "crc": sp.crc}
        up.parts.pop(n, None)  # replaced: if the new one cannot be saved, neither is there
        with disk_writes(what):
            path = srv.pending.save_part(q["uploadId"], n, sp.path, record)
    finally:
        sp.discard()
    up.parts[n] = Part([], sp.size, record["etag"], record["uploaded"], sp.crc, path)
    return _part_reply(md5raw, sp.crc)


async def list_parts(srv, request: web.Request, q: Dict[str, str], bucket: str, key: str) -> Reply:
    up = _upload(srv, q, bucket, key)
    parts = "".join(f"<Part><PartNumber>{n}</PartNumber><LastModified>{rfc3339(p.uploaded)}</LastModified>"
                    f"<ETag>\"{p.etag}\"</ETag><Size>{p.size}</Size></Part>"
                    for n, p in sorted(up.parts.items()))
    return _xml(f"<ListPartsResult{_NS}><Bucket>{_e(bucket)}</Bucket><Key>{_e(key)}</Key>"
                f"<UploadId>{q['uploadId']}</UploadId><IsTruncated>false</IsTruncated>{parts}</ListPartsResult>")


async def list_uploads(srv, request: web.Request, q: Dict[str, str], bucket: str) -> Reply:
    srv.store.bucket(bucket)
    ups = sorted(((u.key, uid, u) for uid, u in srv.multipart.items() if u.bucket == bucket),
                 key=lambda t: (t[0], t[2].created))
    body = "".join(f"<Upload><Key>{_e(k)}</Key><UploadId>{uid}</UploadId>"
                   f"<Initiated>{rfc3339(u.created)}</Initiated></Upload>" for k, uid, u in ups)
    return _xml(f"<ListMultipartUploadsResult{_NS}><Bucket>{_e(bucket)}</Bucket><IsTruncated>false</IsTruncated>"
                f"{body}</ListMultipartUploadsResult>")


async def complete(srv, request: web.Request, q: Dict[str, str], bucket: str, key: str) -> Reply:
    up = _upload(srv, q, bucket, key)
    raw = await srv.body(request)
    try:
        root = ET.fromstring(raw)
    except ET.ParseError:
        raise ServerError(400, "The XML you provided was not well-formed.", xml_code="MalformedXML") from None
    listed = []
    for part in root:
        if local(part.tag) != "Part":
            continue
        fields = {local(c.tag): (c.text or "").strip() for c in part}
        try:
            listed.append((int(fields["PartNumber"]), fields.get("ETag", "").strip('"')))
        except (KeyError, ValueError):
            raise ServerError(400, "Each Part needs a numeric PartNumber.", xml_code="MalformedXML") from None
    if not listed:
        raise ServerError(400, "CompleteMultipartUpload lists no parts.", xml_code="MalformedXML")
    nums = [n for n, _ in listed]
    if any(b <= a for a, b in zip(nums, nums[1:])):
        raise ServerError(400, "The list of parts was not in ascending order.", xml_code="InvalidPartOrder")
    min_size = srv.profile.s["min_part_size"]
    chunks, crc = [], 0
    for i, (n, etag) in enumerate(listed):
        got = up.parts.get(n)
        if got is None or (etag and etag != got.etag):
            raise ServerError(400, f"Part {n} was not uploaded or its ETag does not match.", xml_code="InvalidPart")
        if i < len(listed) - 1 and got.size < min_size:
            raise ServerError(400, f"Part {n} is {got.size} bytes; every part but the last must be at least "
                                   f"{min_size} bytes.", xml_code="EntityTooSmall")
        chunks.append(file_pieces(got.path) if got.path else got.chunks)
        crc = crc32c_combine(crc, got.crc, got.size)
    # The body stays in the parts' chunks (`Chunked`): joining a multi-GB object would copy it all
    # while the client waits; reads copy just the ranges they serve. Its crc32c comes from the
    # parts', and GCS keeps no MD5 for such an object (only crc32c), so neither do we.
    where = srv.store.spool_dir(bucket)
    # With a root, the parts' files are copied into the object's (never read whole into memory).
    body = (Chunked([c for cs in chunks for c in cs]) if where is None
            else assemble(where, chunks, f"{bucket}/{key}", md5=False))
    try:
        obj = srv.store.put(bucket, key, body, content_type=up.content_type, metadata=up.metadata,
                            extra=up.extra, preconditions=_preconds(request), with_md5=False, crc=crc_to_b64(crc))
    finally:
        if body.__class__ is Spooled:
            body.discard()  # renamed into place if stored
    _forget(srv, q["uploadId"])
    return _xml(f"<CompleteMultipartUploadResult{_NS}><Location>{_e(request.scheme)}://{_e(request.host)}/{_e(bucket)}/"
                f"{_e(key)}</Location><Bucket>{_e(bucket)}</Bucket><Key>{_e(key)}</Key>"
                f"<ETag>\"{object_etag(obj)}\"</ETag></CompleteMultipartUploadResult>", headers=_gen_headers(obj))


async def abort(srv, request: web.Request, q: Dict[str, str], bucket: str, key: str) -> Reply:
    _upload(srv, q, bucket, key)
    _forget(srv, q["uploadId"])
    return Reply(204, b"")
