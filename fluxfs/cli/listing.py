"""The commands that list a bucket: ``ls``, ``du`` and ``manifest``.

Each ``cmd_*`` takes the parsed arguments and returns an exit code; failures are raised and
turned into messages by `fluxfs.cli.entry.main`.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List

from .base import human, is_remote, local_path, printable, progress_bar, remote_path, url_of
from .storage import iter_info_batches, list_objects, make_fs, require_bucket


def cmd_ls(args: argparse.Namespace) -> int:
    """``fluxfs ls [-r] [-l] URL``: buckets, or the objects and prefixes under a URL."""
    fs = make_fs(args)
    path = remote_path(args.url, allow_no_bucket=True)
    out = sys.stdout
    if not path:  # flux:// -> the buckets
        for b in sorted(fs.ls("", detail=False)):
            print(printable(url_of(b.strip("/") + "/", args.url)), file=out)
        return 0
    if args.recursive:
        require_bucket(fs, path, args.url)
        n = 0
        if args.unsorted:
            for batch in iter_info_batches(fs, path):
                for info in batch:
                    _print_entry(info, args, out)
                n += len(batch)
        else:
            infos = sorted(list_objects(fs, path, args), key=lambda i: i["name"])
            n = len(infos)
            for info in infos:
                _print_entry(info, args, out)
        if n == 0 and "/" in path.strip("/"):  # nothing below it: a single object, or nothing at all
            try:
                info = fs.info(path)
            except FileNotFoundError:
                info = None
            if info is None or info.get("type") != "file":
                raise FileNotFoundError(f"no such object or prefix: {args.url}")
            _print_entry(info, args, out)
        return 0
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        entries = []
    if not entries:
        require_bucket(fs, path, args.url)
        if "/" in path.strip("/"):  # an empty bucket lists as nothing; a missing prefix is an error
            raise FileNotFoundError(f"no such object or prefix: {args.url}")
    for info in sorted(entries, key=lambda i: i["name"]):
        _print_entry(info, args, out)
    return 0


def _print_entry(info: Dict[str, Any], args: argparse.Namespace, out) -> None:
    is_dir = info.get("type") == "directory"
    url = printable(url_of(info["name"].rstrip("/") + ("/" if is_dir else ""), args.url))
    if not args.long:
        print(url, file=out)
    elif is_dir:
        print(f"{'DIR':>12}  {'':<24}  {'':<16}  {url}", file=out)
    else:
        updated = str(info.get("updated") or info.get("mtime") or "")[:24]
        generation = str(info.get("generation") or "-")
        print(f"{int(info.get('size') or 0):>12}  {updated:<24}  {generation:<16}  {url}", file=out)


def cmd_du(args: argparse.Namespace) -> int:
    """``fluxfs du [-s] [-H] URL``: bytes and object counts per top-level prefix, then the total."""
    fs = make_fs(args)
    path = remote_path(args.url)
    require_bucket(fs, path, args.url)
    base = path.rstrip("/")
    per_child: Dict[str, List[int]] = {}
    total = count = 0
    for info in list_objects(fs, path, args, desc="sizing"):
        size = int(info.get("size") or 0)
        total += size
        count += 1
        rel = info["name"][len(base) + 1:] if info["name"].startswith(base + "/") else ""
        child = rel.split("/", 1)[0] + ("/" if "/" in rel else "") if rel else info["name"].rsplit("/", 1)[-1]
        acc = per_child.setdefault(child, [0, 0])
        acc[0] += size
        acc[1] += 1
    if count == 0 and "/" in path.strip("/"):
        raise FileNotFoundError(f"no objects under {args.url}")
    fmt = human if args.human else str
    if not args.summarize:
        for child in sorted(per_child):
            size, n = per_child[child]
            print(f"{fmt(size)}\t{n}\t{printable(url_of(base + '/' + child, args.url))}")
    print(f"{fmt(total)}\t{count}\t{printable(args.url)} (total)")
    return 0


def cmd_manifest(args: argparse.Namespace) -> int:
    """``fluxfs manifest URL [--output DEST]``: one JSON line per object, to stdout, a file or a flux:// URL."""
    fs = make_fs(args)
    path = remote_path(args.url)
    require_bucket(fs, path, args.url)
    with progress_bar(args, desc="listing", unit=" objects", unit_scale=True) as bar:
        if args.output in ("-", ""):
            n = fs.write_manifest(path, sys.stdout, progress=bar)
        elif is_remote(args.output):
            with fs.open(remote_path(args.output), "wb") as f:
                n = fs.write_manifest(path, f, progress=bar)
        else:  # written to a temporary file and renamed: a failed listing leaves no truncated manifest
            n = fs.write_manifest(path, local_path(args.output), progress=bar)
    if not args.quiet and args.output not in ("-", ""):
        print(f"wrote {n} entries to {args.output}", file=sys.stderr)
    return 0
