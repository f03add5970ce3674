"""What every part of the `fluxfs` command shares: exit codes, `UsageError`, URL parsing, sizes, progress bars.

The parser, the entry point and every command module import this one; it imports none of them,
so the package has no import cycle.
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING

from fluxfs.gcs.urls import DEFAULT_PROTOCOL, OBJECT_PROTOCOLS, parse_url, url_protocol

# Exit codes: what a script calling `fluxfs` can test for.
EXIT_OK = 0
EXIT_ERROR = 1  # anything else (server error, network failure, checksum mismatch)
EXIT_USAGE = 2  # bad arguments, bad URL, unsafe destination path (argparse also uses 2)
EXIT_NOT_FOUND = 3  # bucket or object does not exist
EXIT_PERMISSION = 4  # 401/403: missing or wrong credentials, or no permission
EXIT_EXISTS = 5  # destination exists and overwriting was not asked for
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
EXIT_BROKEN_PIPE = 141  # `fluxfs cat ... | head`: the reader went away, as shells report SIGPIPE

if TYPE_CHECKING:  # tqdm is imported by the commands that show a bar, not by `fluxfs cat` or --help
    from tqdm import tqdm

REMOTE_SCHEMES = OBJECT_PROTOCOLS
# GCS bucket names: 3-63 characters (up to 222 with dots), lowercase letters, digits, '-', '_' and '.'.
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


class UsageError(ValueError):
    """A mistake in what the user asked for (bad URL, bad option, unsafe path): exit code 2."""


# -- URLs -----------------------------------------------------------------------------------

def is_remote(url: str) -> bool:
    """True for flux:// (gs://, gcs://) URLs, False for local paths; other schemes are a usage error."""
    if "://" not in url:
        return False
    # The parser reads a "://" after a '/' as part of a path; on the command line it is a mistyped URL.
    scheme = (url_protocol(url) or url.partition("://")[0]).lower()
    if scheme in REMOTE_SCHEMES:
        return True
    if scheme == "file":
        return False
    raise UsageError(f"unsupported URL scheme {scheme!r} in {url!r}: use flux://BUCKET/PATH (or a local path)")


def remote_path(url: str, allow_no_bucket: bool = False) -> str:
    """``flux://bucket/key`` -> ``"bucket/key"``, checking the URL names a valid bucket; the rest stays as typed."""
    if not is_remote(url):
        raise UsageError(f"not a bucket URL: {url!r} (expected flux://BUCKET/PATH)")
    parsed = parse_url(url)
    if not parsed.bucket:
        if allow_no_bucket and not parsed.key.strip("/"):
            return ""
        raise UsageError(f"no bucket in {url!r} (expected flux://BUCKET/PATH)")
    bucket = parsed.bucket
    if not _BUCKET_RE.match(bucket):
        raise UsageError(f"invalid bucket name {bucket!r} in {url!r}: 3-63 lowercase letters, digits, '-', '_', '.'")
    return parsed.path if parsed.key or url.endswith("/") else bucket  # flux://bucket -> "bucket"


def local_path(url: str) -> str:
    """A local path or ``file://`` URL as a plain path."""
    return url[len("file://"):] if url.startswith("file://") else url


# Characters a terminal acts on instead of showing: C0/C1 controls (ESC starts ANSI sequences), DEL,
# and the bidirectional overrides that make a name display as another.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with every control character written as an escape (``\\x1b``, ``\\u202e``), so an object
    name cannot move the cursor, recolour or clear the terminal, or disguise itself, when printed."""
    if not _UNPRINTABLE.search(text):
        return text
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                            else f"\\u{ord(m.group()):04x}", text)


def url_of(path: str, like: str = "flux://") -> str:
    """A filesystem path back as a URL, in the scheme the user typed."""
    return f"{url_protocol(like) or DEFAULT_PROTOCOL}://{path}"


# -- output ---------------------------------------------------------------------------------

def human(n: float) -> str:
    """A byte count as people read it: ``512 B``, ``1.5 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def show_progress(args: argparse.Namespace) -> bool:
    """Progress bars go to a terminal only (not to logs or pipes) unless --progress asks; never with --quiet."""
    if getattr(args, "quiet", False):
        return False
    if getattr(args, "progress", False):
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False


def progress_bar(args: argparse.Namespace, **kw) -> "tqdm":
    """A progress bar on stderr that shows only if the work lasts over a second, and only when `show_progress`."""
    from tqdm import tqdm

    return tqdm(file=sys.stderr, delay=1.0, disable=not show_progress(args), dynamic_ncols=True, **kw)
