"""``fluxfs cache ls|du|clear DIR``: what a node-local cache directory holds, and emptying it.

`fluxfs.cache` is imported inside the command, so other commands never load it. Only directories a
NodeCache made (its CACHEDIR.TAG) are read or cleared, and `clear` removes only files the cache made.
"""
from __future__ import annotations

import argparse
import datetime
import os
import sys

from .base import UsageError, human, printable

ACTIONS = ("ls", "du", "clear")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=ACTIONS, help="ls: the entries, least recently used first; du: their total "
                   "size; clear: remove every entry not in use and what killed fills left")
    p.add_argument("directory", metavar="DIR", help="the cache directory (the cache_dir option)")
    p.add_argument("-H", "--human", action="store_true", help="sizes like 1.5 MiB")


def cmd_cache(args: argparse.Namespace) -> int:
    """Run ``fluxfs cache ACTION DIR``."""
    from fluxfs.cache import NodeCache
    from fluxfs.cache.entry import is_cache_dir

    directory = args.directory
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"no cache directory {directory!r}")
    if not is_cache_dir(directory):
        raise UsageError(f"{directory!r} is not a fluxfs cache directory (it has no CACHEDIR.TAG written by fluxfs)")
    cache = NodeCache(directory)
    size = human if args.human else str
    if args.action == "ls":
        for meta, used in cache.entries():
            when = datetime.datetime.fromtimestamp(used, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            print(f"{size(meta.size):>12}  {when}  "
                  f"{printable(f'flux://{meta.bucket}/{meta.key}#{meta.generation}')}")
    elif args.action == "du":
        print(f"{size(cache.usage())}\t{len(cache.entries())} entries\t{printable(cache.directory)}")
    else:
        removed, freed, kept = cache.clear()
        kept_text = f"; {kept} in use kept" if kept else ""
        if not args.quiet:
            freed_text = human(freed) if args.human else f"{freed} bytes"
            print(f"removed {removed} entries ({freed_text}) from {printable(cache.directory)}{kept_text}",
                  file=sys.stderr)
    return 0
