"""A multipart/related upload (metadata part, media part) received to a file under ``--root``,
split without loading the media: the media part is copied into a file of its own, hashed on the way.

Small bodies are read back and split in memory, exactly as without a root (`split_multipart`);
a large one has its two parts' headers parsed the same way, from the first MiB of the file.
"""
from __future__ import annotations

import re
from typing import Dict, Iterable, List, Tuple, Union

from .errors import ServerError
from .spool import Spooled, assemble, file_pieces

SMALL = 8 * 1024 * 1024   # bodies up to this size are split in memory
_HEAD = 1024 * 1024       # the metadata part and both parts' headers must lie in the first MiB
_TAIL = 64 * 1024

Parts = List[Tuple[Dict[str, str], bytes]]


def _two_parts(msg: str) -> ServerError:
    return ServerError(400, f"multipart upload needs 2 parts (metadata, media): {msg}.", "invalid")


def _delimiter(ctype: str) -> bytes:
    """The boundary line's start ("--" and the Content-Type's boundary); 400 without one."""
    m = re.search(r'boundary="?([^";]+)"?', ctype)
    if not m:
        raise ServerError(400, "multipart upload without a boundary.", "invalid")
    return b"--" + m.group(1).encode()


def split_multipart(body: bytes, ctype: str) -> Parts:
    """The (headers, bytes) of the two parts (metadata, media) of a multipart/related body in memory."""
    chunks = body.split(_delimiter(ctype))
    # The line ending comes from the first boundary line and holds for the whole body: RFC 2046
    # says CRLF, gcsfs sends bare LF. Guessing it per part would eat a payload's own trailing
    # '\r' when a bare-LF body carries data ending in '\r'.
    eol = b"\r\n" if len(chunks) > 1 and chunks[1].startswith(b"\r\n") else b"\n"
    parts = []
    for c in chunks[1:]:
        if c.startswith(b"--"):
            break
        if c.startswith(eol):
            c = c[len(eol):]
        head, sep, data = c.partition(eol + eol)
        if data.endswith(eol):
            data = data[:-len(eol)]
        hdrs = {}
        for line in head.decode("latin-1").splitlines():
            k, _, v = line.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        parts.append((hdrs, data))
    if len(parts) != 2:
        raise ServerError(400, f"multipart upload needs 2 parts (metadata, media), got {len(parts)}.", "invalid")
    return parts


def split_file(sp: Spooled, ctype: str, directory: str, what: str
               ) -> Tuple[Dict[str, str], bytes, Dict[str, str], Union[bytes, Spooled]]:
    """(metadata headers, metadata, media headers, media) of the body in `sp`; the media as bytes
    for a small body, else as a new spooled file. `sp` is left for the caller to remove."""
    if sp.size <= SMALL:
        with open(sp.path, "rb") as f:
            (h1, meta), (h2, media) = split_multipart(f.read(), ctype)
        return h1, meta, h2, media
    delim = _delimiter(ctype)
    with open(sp.path, "rb") as f:
        head = f.read(_HEAD)
        f.seek(max(0, sp.size - _TAIL))
        tail_at = f.tell()
        tail = f.read()
    first = head.find(delim)
    if first < 0:
        raise _two_parts("no boundary line")
    eol = b"\r\n" if head.startswith(b"\r\n", first + len(delim)) else b"\n"
    second = head.find(delim, first + len(delim))
    if second < 0 or head.startswith(b"--", second + len(delim)):
        raise _two_parts("one part, or a metadata part over 1 MiB")
    blank = head.find(eol + eol, second + len(delim))
    if blank < 0:
        raise _two_parts("the media part's headers do not end in the first MiB")
    start = blank + 2 * len(eol)
    close = tail.rfind(delim)
    if close < 0 or not tail.startswith(b"--", close + len(delim)):
        raise _two_parts("no closing boundary")
    end = tail_at + close
    if end - len(eol) >= start and tail[close - len(eol):close] == eol:
        end -= len(eol)
    if end < start:
        raise _two_parts("the closing boundary comes before the media")
    # The headers of both parts, and the metadata, parsed as the in-memory split does.
    (h1, meta), (h2, _) = split_multipart(head[:start] + eol + delim + b"--", ctype)
    media = assemble(directory, [_no_boundary(file_pieces(sp.path, start, end), delim)], what)
    return h1, meta, h2, media


def _no_boundary(pieces: Iterable[bytes], delim: bytes) -> Iterable[bytes]:
    """`pieces`, refused if a boundary line lies inside them (a third part)."""
    carry = b""
    for piece in pieces:
        if (carry + piece[:len(delim)]).find(delim) >= 0 or piece.find(delim) >= 0:
            raise _two_parts("more than 2 parts")
        carry = piece[-(len(delim) - 1):] if len(delim) > 1 else b""
        yield piece
