"""What an entry of the node-local cache is called and what its sidecar says.

An entry is one generation of one object of one store: its file names derive from a hash of (store, bucket,
key, generation), so an overwritten object (a new generation) is a different entry and is never served from
the old one, and two stores (endpoints) with the same bucket and key names never share an entry.
Files of entry `<id>` (40 hex digits): `<id>.data` (the object's bytes; appears complete only by rename),
`<id>.meta` (JSON sidecar: bucket, key, generation, size, crc32c), `<id>.lock` (flock target, empty) and
`<id>.<pid>.<nonce>.part` while filling (ignored by lookups, removed once no filler holds the lock).
Small objects that `fs.cat_objects` caches are packed entries instead (packs.py, index.py), listed as a `Meta`.
"""
from __future__ import annotations

import dataclasses
import errno
import functools
import hashlib
import json
import os
import pwd
import re
import stat
import urllib.parse
from typing import Any, Optional, Union

from ..gcs.checksums import crc32c_combine, crc_from_b64, crc_to_b64

NAME = re.compile(r"^(?P<id>[0-9a-f]{40})\.(?P<kind>data|meta|lock|\d+\.[0-9a-f]+\.part)$")
TAG = "CACHEDIR.TAG"  # marks the directory as a cache (backup tools skip it; `clear` refuses others)
TAG_TEXT = ("Signature: 8a477f597d28d172789f06886806bc55\n"
            "# This directory is a fluxfs node-local cache; `fluxfs cache clear DIR` empties it.\n")
DIR_LOCK = ".fluxfs-cache.lock"  # serializes space accounting (reserve, evict, clear)
USAGE = ".fluxfs-cache.usage"    # bytes in use as last counted (never below the truth; see evict.make_room)


NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def open_fixed(path: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A file of the cache opened by its name, never through a symbolic link planted under that name
    (`O_NOFOLLOW`: ELOOP instead)."""
    return os.open(path, flags | NOFOLLOW, mode)


def check_directory(directory: str, shared: bool) -> None:
    """Refuse a cache directory another user could write (it owns it, or group/others may write it), unless
    `shared` says that is intended: whoever can write it decides what bytes the cache serves."""
    st = os.stat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(f"cache_dir {directory!r} is not a directory: name a directory (it is made, "
                                 "mode 0700, if missing)")
    others_write = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if shared or (st.st_uid == os.geteuid() and not others_write):
        return
    if os.statvfs(directory).f_flag & os.ST_RDONLY:
        return  # a read-only mount (a cache baked into an image): nobody can plant anything in it
    try:
        owner = f"{pwd.getpwuid(st.st_uid).pw_name} (uid {st.st_uid})"
    except KeyError:
        owner = f"uid {st.st_uid}"
    why = ("another user owns it" if st.st_uid != os.geteuid() else "its group or others may write it")
    raise PermissionError(
        f"cache_dir {directory!r} is owned by {owner} with mode {stat.filemode(st.st_mode)} "
        f"({stat.S_IMODE(st.st_mode):04o}): {why}, so they could plant entries this process would serve as "
        f"objects' bytes; use a directory of your own that only you can write (chown it to uid {os.geteuid()}, "
        "chmod 700, or name a new subdirectory: it is made mode 0700), or pass cache_shared=True if sharing it "
        "between users is intended (every user who can write it is then trusted with what it serves: "
        "docs/scaling.md)")


@functools.lru_cache(maxsize=4096)  # a `cat_objects` call asks twice per miss (the lookup, then the claim)
def entry_id(bucket: str, key: str, generation: Union[str, int], store: str = "") -> str:
    """The entry's name: sha256 of (store, bucket, key, generation) (keys may be 1 KiB of any UTF-8; names
    must be short and safe)."""
    parts = [bucket, key, str(generation)] if not store else [store, bucket, key, str(generation)]
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode("utf-8")).hexdigest()[:40]


def store_id(location: str) -> str:
    """Which store bytes come from: its endpoint URL normalized (scheme and host lowercased, a default port
    dropped, no trailing slash). Bucket names are unique within one endpoint (one universe), not across them:
    an emulator's `bkt/k#1` and GCS's are different objects."""
    url = urllib.parse.urlsplit(str(location).strip())
    scheme, host = url.scheme.lower(), (url.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port = url.port
    except ValueError:
        port = None
    netloc = host if port is None or port == {"http": 80, "https": 443}.get(scheme) else f"{host}:{port}"
    return f"{scheme}://{netloc}{url.path.rstrip('/')}"


def crc_value(crc32c: Union[None, int, str]) -> Optional[int]:
    """A crc32c as an int, from an int or GCS's base64 text (an info dict's "crc32c"); None: unknown."""
    if crc32c is None or isinstance(crc32c, int) and not isinstance(crc32c, bool):
        return crc32c
    if isinstance(crc32c, str):
        try:
            return crc_from_b64(crc32c)
        except ValueError:
            pass
    raise ValueError(f"crc32c must be an int or GCS's base64 text, not {crc32c!r}")


@dataclasses.dataclass(frozen=True)
class Meta:
    """The sidecar of an entry: which object generation (of which store) its bytes are, their size and crc32c."""

    bucket: str
    key: str
    generation: str
    size: int
    crc32c: Optional[int]
    durable: bool = True   # False: renamed into place without an fsync (small objects): checked when opened
    store: str = ""        # the endpoint the bytes came from (`store_id`); "" for a NodeCache used directly
    parts: Optional[tuple[int, tuple[int, ...]]] = None  # (part size, each part's crc32c): a ranged fill's

    def to_bytes(self) -> bytes:
        crc = crc_to_b64(self.crc32c) if self.crc32c is not None else None
        d = {"bucket": self.bucket, "key": self.key, "generation": self.generation, "size": self.size, "crc32c": crc}
        if not self.durable:
            d["durable"] = False
        if self.store:
            d["store"] = self.store
        if self.parts is not None:
            d["parts"] = {"size": self.parts[0], "crc32c": list(self.parts[1])}
        return json.dumps(d, ensure_ascii=False).encode("utf-8")

    @classmethod
    def read(cls, path: str) -> Optional["Meta"]:
        """The sidecar at `path`; None when it is missing or not one fluxfs wrote (then the entry is a miss)."""
        try:
            with os.fdopen(open_fixed(path), "rb") as f:
                d = json.loads(f.read(65536))
            crc = crc_value(d.get("crc32c"))
            return cls(str(d["bucket"]), str(d["key"]), str(d["generation"]), int(d["size"]),
                       crc, d.get("durable", True) is not False, str(d.get("store") or ""),
                       _parts(d.get("parts"), int(d["size"]), crc))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def names(self, bucket: str, key: str, generation: Any, size: Optional[int], store: str = "") -> bool:
        """True when this sidecar describes exactly that object generation of that store (and size, when given)."""
        return ((self.store, self.bucket, self.key, self.generation) == (store, bucket, key, str(generation))
                and (size is None or self.size == size))


def _parts(d: Any, size: int, crc: Optional[int]) -> Optional[tuple[int, tuple[int, ...]]]:
    """A sidecar's part crc32c (what a ranged read checks of the parts it reads), or None (none, or not sound:
    not combining to the entry's crc32c, which the caller's must match; the whole file is checked instead)."""
    if not isinstance(d, dict) or type(d.get("size")) is not int or d["size"] <= 0 or not isinstance(
            d.get("crc32c"), list) or crc is None:
        return None
    crcs, part = tuple(d["crc32c"]), d["size"]
    if len(crcs) != max(1, -(-size // part)) or not all(type(c) is int and 0 <= c < 2**32 for c in crcs):
        return None
    whole = crcs[0]
    for i, c in enumerate(crcs[1:], 1):
        whole = crc32c_combine(whole, c, min(part, size - i * part))
    return (part, crcs) if whole == crc else None


def parse_name(name: str) -> Optional[tuple[str, str]]:
    """(id, kind) of a file fluxfs's cache made, kind one of data/meta/lock/part; None for any other file."""
    m = NAME.match(name)
    if m is None:
        return None
    kind = m.group("kind")
    return m.group("id"), ("part" if kind.endswith(".part") else kind)


def temp_name(eid: str) -> str:
    """A fill's temporary name: the filler's pid and a nonce, so two processes never share one."""
    return f"{eid}.{os.getpid()}.{os.urandom(4).hex()}.part"


def write_tag(directory: str) -> None:
    """Mark `directory` as a cache (once; a concurrent first use by another process is fine)."""
    path = os.path.join(directory, TAG)
    if os.path.exists(path):
        return
    try:
        fd = open_fixed(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return  # a read-only directory: its entries are served as they are, nothing is written
        raise
    with os.fdopen(fd, "w") as f:
        f.write(TAG_TEXT)


def is_cache_dir(directory: str) -> bool:
    """True when `directory` holds the tag a NodeCache writes (`fluxfs cache clear` refuses other directories)."""
    try:
        with os.fdopen(open_fixed(os.path.join(directory, TAG)), encoding="utf-8", errors="replace") as f:
            return f.read(len(TAG_TEXT)) == TAG_TEXT
    except OSError:
        return False
