"""Bucket upkeep: ``mb`` (make a bucket) and ``cleanup`` (remove what crashed jobs left behind).

The only CLI module that reaches into fluxfs's internals (temporary objects, unfinished XML
multipart uploads): when those move, this is the one place to follow them.
"""
from __future__ import annotations

import argparse
import sys

from .base import UsageError, printable, remote_path
from .storage import make_fs, require_bucket

_SHOWN = 10  # objects `cleanup` names when it leaves some alone


def cmd_mb(args: argparse.Namespace) -> int:
    """``fluxfs mb flux://BUCKET``: create a bucket and say so (one line on stderr); exit 5 if it exists."""
    fs = make_fs(args)
    path = remote_path(args.url)
    bucket = path.strip("/")
    if "/" in bucket:
        raise UsageError(f"mb takes a bucket URL such as flux://my-bucket, not {args.url!r}")
    if fs.exists(bucket):
        raise FileExistsError(f"bucket {bucket!r} exists")
    fs.mkdir(bucket, create_parents=True)
    if not args.quiet:
        print(f"created bucket {printable(args.url.rstrip('/'))}", file=sys.stderr)
    return 0


def _names(paths: list[str]) -> str:
    return ", ".join(map(printable, paths[:_SHOWN])) + (f" and {len(paths) - _SHOWN} more"
                                                         if len(paths) > _SHOWN else "")


def cmd_cleanup(args: argparse.Namespace) -> int:
    """``fluxfs cleanup flux://BUCKET --older-than AGE``: delete stale temporaries, abort fluxfs's stale uploads
    (another tool's too with ``--abort-foreign-uploads``; otherwise they are listed)."""
    from fluxfs.temporaries import cleanup_report, parse_age

    try:
        age = parse_age(args.older_than)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    fs = make_fs(args)
    path = remote_path(args.url)
    require_bucket(fs, path, args.url)
    # Unfinished XML multipart uploads (a killed writer's) hold parts that no listing shows.
    report = cleanup_report(fs, args.url, older_than=age,
                            abort_foreign_uploads=getattr(args, "abort_foreign_uploads", False))
    if not args.quiet:
        print(f"removed {report.removed} temporary object(s) and aborted {len(report.aborted)} unfinished upload(s) "
              f"from {args.url}", file=sys.stderr)
    # Said even with --quiet: the user should know why these stay.
    if report.not_ours:
        print(f"left {len(report.not_ours)} object(s) under {fs.options.temp_prefix} that fluxfs did not create "
              f"(not named and marked as its temporaries): {_names(report.not_ours)}", file=sys.stderr)
    if report.foreign_uploads:
        print(f"left {len(report.foreign_uploads)} unfinished upload(s) that fluxfs did not start (abort them with "
              f"--abort-foreign-uploads): {_names(report.foreign_uploads)}", file=sys.stderr)
    return 0
