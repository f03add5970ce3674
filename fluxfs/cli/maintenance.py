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
    """``fluxfs mb flux://BUCKET``: create a bucket; exit 5 if it exists."""
    fs = make_fs(args)
    path = remote_path(args.url)
    bucket = path.strip("/")
    if "/" in bucket:
        raise UsageError(f"mb takes a bucket URL such as flux://my-bucket, not {args.url!r}")
    if fs.exists(bucket):
        raise FileExistsError(f"bucket {bucket!r} exists")
    fs.mkdir(bucket, create_parents=True)
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    """``fluxfs cleanup flux://BUCKET --older-than AGE``: delete stale temporaries, abort stale uploads."""
    from fluxfs.gcs.bridge import run
    from fluxfs.temporaries import abort_incomplete_uploads, cleanup_report, parse_age

    try:
        age = parse_age(args.older_than)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    fs = make_fs(args)
    path = remote_path(args.url)
    require_bucket(fs, path, args.url)
    report = cleanup_report(fs, args.url, older_than=age)
    n = report.removed
    # Unfinished XML multipart uploads (a killed writer's) hold parts that no listing shows.
    bucket, _, prefix = path.partition("/")
    aborted = run(fs, abort_incomplete_uploads, fs, bucket, prefix, age or 0.0)
    if not args.quiet:
        print(f"removed {n} temporary object(s) and aborted {len(aborted)} unfinished upload(s) "
              f"from {args.url}", file=sys.stderr)
    if report.not_ours:  # said even with --quiet: the user should know why these stay
        shown = ", ".join(map(printable, report.not_ours[:_SHOWN])) + (f" and {len(report.not_ours) - _SHOWN} more"
                                                       if len(report.not_ours) > _SHOWN else "")
        print(f"left {len(report.not_ours)} object(s) under {fs.options.temp_prefix} that fluxfs did not create "
              f"(not named and marked as its temporaries): {shown}", file=sys.stderr)
    return 0
