"""The commands that move bytes: ``cat`` (objects to stdout) and ``cp`` (local <-> flux://, flux:// -> flux://).

``cp`` plans every transfer and checks it (unsafe names, collisions) before a byte moves, then
`fluxfs.cli.transfers` runs them ``--jobs`` at a time. With ``-n`` an existing destination is
skipped and reported, in both directions (as ``gcloud storage cp -n`` does).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List

from .base import EXIT_ERROR, UsageError, human, is_remote, local_path, remote_path, url_of
from .storage import list_objects, make_fs, require_bucket

if TYPE_CHECKING:  # `cat` runs once per shard in webdataset pipes: it does not import the transfer machinery
    from .transfers import Transfer

CAT_CHUNK = 8 * 1024 * 1024

SHOW_SKIPPED = 10  # destinations named in the "skipped" report (cp -n); the rest are counted


# -- cat ------------------------------------------------------------------------------------

def cmd_cat(args: argparse.Namespace) -> int:
    """``fluxfs cat URL...``: the objects' bytes to stdout, in order; every URL is checked first."""
    fs = make_fs(args)
    paths = [remote_path(u) for u in args.urls]  # validate every URL before printing anything
    out = sys.stdout.buffer
    for url, path in zip(args.urls, paths):
        try:
            f = fs.open(path, "rb")
        except FileNotFoundError:
            require_bucket(fs, path, url)
            raise FileNotFoundError(f"no such object: {url}") from None
        with f:
            shutil.copyfileobj(f, out, CAT_CHUNK)
    out.flush()
    return 0


# -- cp -------------------------------------------------------------------------------------

def safe_local_target(root: str, rel: str, url: str) -> str:
    """`root/rel` for an object's relative name, refusing names that would land outside `root`.

    Object names are arbitrary strings: ``../../x`` or a symlink inside the destination must
    never make a download write anywhere but under the destination directory.
    """
    parts = rel.split("/")
    if "\x00" in rel:  # no local file name can hold one; open() would fail with a ValueError mid-copy
        raise UsageError(f"refusing to copy {url}: its name contains a NUL byte (\\x00), which a local file "
                         "name cannot; nothing was copied")
    from .transfers import name_max

    longest = max(parts, key=lambda p: len(os.fsencode(p)))
    limit = name_max(root)
    if len(os.fsencode(longest)) > limit:  # open() would fail with "File name too long" mid-copy
        raise UsageError(f"refusing to copy {url}: a part of its name is {len(os.fsencode(longest))} bytes long, "
                         f"over the {limit} bytes a local file name can have here; nothing was copied")
    if any(p in (".", "..") for p in parts):
        raise UsageError(f"refusing to copy {url}: its name contains '.' or '..' path components "
                         f"and could write outside {root!r}; nothing was copied")
    target = os.path.join(root, *[p for p in parts if p])
    real_root = os.path.realpath(root)
    real_target = os.path.realpath(target)
    if real_target == real_root or os.path.commonpath([real_root, real_target]) != real_root:
        raise UsageError(f"refusing to copy {url}: it would be written to {real_target!r}, outside {root!r}; "
                         "nothing was copied")
    return target


MAX_OBJECT_NAME = 1024  # bytes of UTF-8, GCS's limit


def check_object_name(path: str, src: str) -> None:
    """Refuse, before a byte moves, a destination object name GCS would refuse mid-copy (its rules:
    1-1024 bytes of UTF-8, no carriage return or line feed, not "." or ".."), naming the source and why."""
    key = path.split("/", 1)[1] if "/" in path else ""
    why = None
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:  # a local file name in another encoding (os.fsdecode's surrogates)
        why = "is not valid UTF-8, which object names must be"
    else:
        if "\x00" in key:
            why = "contains a NUL byte (\\x00)"
        elif "\r" in key or "\n" in key:
            why = "contains a carriage return or line feed, which GCS refuses in object names"
        elif size > MAX_OBJECT_NAME:
            why = f"is {size} bytes long as an object name, over GCS's limit of {MAX_OBJECT_NAME}"
        elif key in (".", ".."):
            why = f"would be the object name {key!r}, which GCS refuses"
    if why:
        shown = os.fsencode(src).decode("utf-8", "backslashreplace")  # undecodable bytes as \xff
        raise UsageError(f"refusing to copy {shown}: its name {why}; nothing was copied")


def _check_no_collisions(transfers: List[Transfer]) -> None:
    seen: Dict[str, str] = {}
    for t in transfers:
        key = os.path.normcase(os.path.abspath(t.dst)) if t.kind == "down" else t.dst
        if key in seen:
            raise UsageError(f"{seen[key]} and {t.src} would both be written to {t.dst}; nothing was copied")
        seen[key] = t.src
    if transfers and transfers[0].kind == "down":
        for t in transfers:
            parent = os.path.dirname(os.path.normcase(os.path.abspath(t.dst)))
            while parent and parent != os.path.dirname(parent):
                if parent in seen:
                    raise UsageError(f"{seen[parent]} and {t.src} need {parent} to be both a file and a "
                                     "directory; nothing was copied")
                parent = os.path.dirname(parent)


def _remote_join(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}" if base.rstrip("/") else name


@dataclass
class Plan:
    """What `cp` will do: the transfers, and what it cannot do and will report."""

    transfers: List[Transfer] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)  # destinations that exist already (cp -n)
    unwritable: List[str] = field(default_factory=list)  # messages for objects a download cannot write


def plan_cp(fs, args: argparse.Namespace) -> Plan:
    """Every (source, destination) pair, validated before a single byte moves."""
    from .transfers import Transfer

    srcs, dst = list(args.srcs), args.dst
    src_remote = [is_remote(s) for s in srcs]
    dst_remote = is_remote(dst)
    if any(src_remote) and not all(src_remote):
        raise UsageError("sources must be all local paths or all flux:// URLs")
    if not src_remote[0] and not dst_remote:
        raise UsageError("one side of cp must be a flux:// URL (use cp(1) for local copies)")
    many = len(srcs) > 1
    plan = Plan()
    transfers = plan.transfers

    if not src_remote[0]:  # upload
        dpath = remote_path(dst)
        dst_dir = many or dst.endswith("/") or "/" not in dpath.rstrip("/")
        for s in map(local_path, srcs):
            if os.path.isdir(s):
                if not args.recursive:
                    raise UsageError(f"{s} is a directory: use cp -r")
                base = _remote_join(dpath, os.path.basename(os.path.normpath(s))) if dst_dir else dpath
                for root, dirs, files in os.walk(s):
                    dirs.sort()
                    for name in sorted(files):
                        full = os.path.join(root, name)
                        rel = os.path.relpath(full, s).replace(os.sep, "/")
                        transfers.append(Transfer("up", full, _remote_join(base, rel), os.path.getsize(full)))
            elif os.path.isfile(s):
                target = _remote_join(dpath, os.path.basename(s)) if dst_dir else dpath
                transfers.append(Transfer("up", s, target, os.path.getsize(s)))
            else:
                raise FileNotFoundError(f"no such local file or directory: {s}")
        require_bucket(fs, dpath, dst)
    else:  # download or bucket-to-bucket copy
        kind = "copy" if dst_remote else "down"
        if kind == "down":
            dst = local_path(dst)
            dst_dir = many or os.path.isdir(dst) or dst.endswith(os.sep) or dst.endswith("/")
        else:
            dpath = remote_path(dst)
            dst_dir = many or dst.endswith("/") or "/" not in dpath.rstrip("/")
        join = (lambda base, rel, url: safe_local_target(base, rel, url)) if kind == "down" else \
            (lambda base, rel, url: _remote_join(base, rel))
        dst_base = dst if kind == "down" else dpath
        for s in srcs:
            spath = remote_path(s)
            try:
                info = None if s.endswith("/") else fs.info(spath)
            except FileNotFoundError:
                info = None
            if info is not None and info.get("type") == "file":
                name = spath.rsplit("/", 1)[-1]
                if dst_dir:
                    target = join(dst_base, name, s)
                else:
                    target = dst_base
                transfers.append(Transfer(kind, spath, target, int(info.get("size") or 0), info))
                continue
            if not args.recursive:
                require_bucket(fs, spath, s)
                if info is None and s.endswith("/") and "/" in spath.strip("/"):
                    try:  # "flux://b/images/": a prefix with objects under it?
                        info = fs.info(spath.rstrip("/"))
                    except FileNotFoundError:
                        info = None
                    if info is None or info.get("type") != "directory":
                        raise FileNotFoundError(f"no objects under {s} (to copy a prefix, use cp -r)")
                if info is None:
                    raise FileNotFoundError(f"no such object: {s}")
                raise UsageError(f"{s} is a prefix (a directory): use cp -r")
            require_bucket(fs, spath, s)
            prefix = spath.rstrip("/")
            objects = [i for i in list_objects(fs, spath, args) if i["name"].startswith(prefix + "/")]
            if not objects:
                raise FileNotFoundError(f"no objects under {s}")
            leaf = prefix.rsplit("/", 1)[-1] if "/" in prefix else prefix
            root = (join(dst_base, leaf, s) if dst_dir else dst_base)
            for i in sorted(objects, key=lambda i: i["name"]):
                rel = i["name"][len(prefix) + 1:]
                url = url_of(i["name"], s)
                if kind == "down" and (not rel or rel.endswith("/")):
                    size = int(i.get("size") or 0)
                    if size:  # it would have to be a file and the directory of its siblings at once
                        plan.unwritable.append(
                            f"{url} holds {size} bytes but its name ends in '/', which a local file name cannot; "
                            f"get them with `fluxfs cat {url} > FILE`")
                    continue  # a zero-byte "directory marker" object: nothing to write
                transfers.append(Transfer(kind, i["name"], join(root, rel, url), int(i.get("size") or 0), i))
        if kind == "copy":
            require_bucket(fs, dpath, dst)
    for t in transfers:
        if t.kind != "down":
            check_object_name(t.dst, t.src if t.kind == "up" else url_of(t.src, srcs[0]))
    _check_no_collisions(transfers)
    if args.no_clobber and transfers and transfers[0].kind == "down":  # local checks cost nothing: do them now
        plan.skipped = [t.dst for t in transfers if os.path.lexists(t.dst)]
        transfers[:] = [t for t in transfers if not os.path.lexists(t.dst)]
    return plan


def cmd_cp(args: argparse.Namespace) -> int:
    """``fluxfs cp [-r] [-n] [-j N] SRC... DST``: plan, check, copy; a summary on stderr.

    Exit 0 when every source was copied or (``-n``) skipped as existing; 1 when an object could
    not be written (named on stderr), after copying everything else.
    """
    from .transfers import run_transfers

    fs = make_fs(args)
    t0 = time.perf_counter()
    plan = plan_cp(fs, args)
    outcome = run_transfers(fs, plan.transfers, args)
    skipped = plan.skipped + outcome.skipped
    if not args.quiet:
        dt = time.perf_counter() - t0
        nbytes = outcome.copied_bytes
        print(f"copied {outcome.copied} file(s), {human(nbytes)} in {dt:.1f} s "
              f"({human(nbytes / dt if dt else 0)}/s)", file=sys.stderr)
        if skipped:
            shown = "".join(f"\n  {d}" for d in skipped[:SHOW_SKIPPED])
            more = f"\n  ... and {len(skipped) - SHOW_SKIPPED} more" if len(skipped) > SHOW_SKIPPED else ""
            print(f"skipped {len(skipped)} existing destination(s) (cp -n):{shown}{more}", file=sys.stderr)
    for message in plan.unwritable:
        print(f"fluxfs cp: not copied: {message}", file=sys.stderr)
    return EXIT_ERROR if plan.unwritable else 0

