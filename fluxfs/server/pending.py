"""In-progress uploads on disk (``--root DIR``), so a restart loses nothing that was acknowledged.

Layout under ROOT/uploads/: ``resumable/UID.json`` (the session: bucket, name, metadata, query,
start time) and ``resumable/UID.data`` (the bytes received so far, appended and fsynced before
each 308 answer); ``multipart/UID/upload.json`` (bucket, key, fields, start time) and, per part,
``multipart/UID/N`` (its bytes) then ``multipart/UID/N.json`` (size, ETag, crc32c, time), both
written before the part's 200. A part counts only once its ``.json`` exists, so a crash mid-part
leaves the previous state. Expiry follows GCS: resumable sessions end a week after they start
(`RESUMABLE_TTL_S`); XML multipart uploads stay until completed or aborted.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any, Dict, Iterable, Tuple

from .persist import atomic_write, fsync_dir
from .spool import unlink_quietly

RESUMABLE_TTL_S = 7 * 24 * 3600.0   # GCS: a resumable session URI expires one week after it is started


class PendingUploads:
    """Saves, and reloads on start, the server's unfinished resumable sessions and multipart uploads."""

    def __init__(self, root: str):
        self.resumable_dir = os.path.join(os.path.abspath(root), "uploads", "resumable")
        self.multipart_dir = os.path.join(os.path.abspath(root), "uploads", "multipart")
        os.makedirs(self.resumable_dir, exist_ok=True)
        os.makedirs(self.multipart_dir, exist_ok=True)

    # -- resumable sessions --
    def _r(self, uid: str, ext: str) -> str:
        return os.path.join(self.resumable_dir, f"{uid}.{ext}")

    def start_resumable(self, uid: str, session: Dict[str, Any]) -> None:
        atomic_write(self._r(uid, "data"), b"")
        atomic_write(self._r(uid, "json"), json.dumps(session).encode())

    def resumable_data(self, uid: str) -> str:
        """The file of a session's bytes: appended to as they arrive and fsynced before each 308 answer
        (uploads.py); renamed into the bucket when the upload completes."""
        return self._r(uid, "data")

    def drop_resumable(self, uid: str) -> None:
        unlink_quietly(self._r(uid, "json"))
        unlink_quietly(self._r(uid, "data"))

    def load_resumable(self, ttl: float = RESUMABLE_TTL_S) -> Iterable[Tuple[str, Dict[str, Any], str]]:
        """(uid, session, file of its bytes so far) of every saved session; expired ones are deleted instead."""
        now = time.time()
        for fn in sorted(os.listdir(self.resumable_dir)):
            if fn.startswith(".tmp-"):
                unlink_quietly(os.path.join(self.resumable_dir, fn))
                continue
            if not fn.endswith(".json"):
                continue
            uid = fn[:-len(".json")]
            try:
                with open(self._r(uid, "json"), "rb") as f:
                    session = json.load(f)
                if not os.path.isfile(self._r(uid, "data")):
                    raise FileNotFoundError(self._r(uid, "data"))
            except (OSError, ValueError):
                self.drop_resumable(uid)
                continue
            if now - session["created"] > ttl:
                self.drop_resumable(uid)
                continue
            yield uid, session, self._r(uid, "data")

    # -- XML multipart uploads --
    def _m(self, uid: str, *name: str) -> str:
        return os.path.join(self.multipart_dir, uid, *name)

    def start_multipart(self, uid: str, upload: Dict[str, Any]) -> None:
        os.makedirs(self._m(uid), exist_ok=True)
        fsync_dir(self.multipart_dir)
        atomic_write(self._m(uid, "upload.json"), json.dumps(upload).encode())

    def part_dir(self, uid: str) -> str:
        """Where a part is received (a temporary file, renamed by `save_part`)."""
        return self._m(uid)

    def save_part(self, uid: str, number: int, received: str, part: Dict[str, Any]) -> str:
        """A part's bytes (the file `received`, renamed), then its record: the part exists on disk before
        the server acknowledges it. If the record cannot be written, the part is gone (both files). Its path."""
        path = self._m(uid, str(number))
        try:
            os.replace(received, path)
            fsync_dir(self._m(uid))
            atomic_write(self._m(uid, f"{number}.json"), json.dumps(part).encode())
        except BaseException:
            unlink_quietly(self._m(uid, f"{number}.json"))
            unlink_quietly(path)
            raise
        return path

    def drop_multipart(self, uid: str) -> None:
        shutil.rmtree(self._m(uid), ignore_errors=True)
        fsync_dir(self.multipart_dir)

    def load_multipart(self) -> Iterable[Tuple[str, Dict[str, Any], Dict[int, Tuple[Dict[str, Any], str]]]]:
        """(uid, upload, {part number: (record, file of its bytes)}) of every saved multipart upload."""
        for uid in sorted(os.listdir(self.multipart_dir)):
            try:
                with open(self._m(uid, "upload.json"), "rb") as f:
                    upload = json.load(f)
            except (OSError, ValueError):
                self.drop_multipart(uid)  # its initiate was never acknowledged
                continue
            parts: Dict[int, Tuple[Dict[str, Any], str]] = {}
            for fn in os.listdir(self._m(uid)):
                if not fn.endswith(".json") or not fn[:-5].isdigit():
                    continue
                n = int(fn[:-5])
                try:
                    with open(self._m(uid, fn), "rb") as f:
                        record = json.load(f)
                    size = os.path.getsize(self._m(uid, str(n)))
                except (OSError, ValueError):
                    continue
                if size == record["size"]:
                    parts[n] = (record, self._m(uid, str(n)))
            yield uid, upload, parts
