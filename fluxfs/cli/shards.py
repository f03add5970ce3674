"""``fluxfs shard``: pack a prefix of objects into tar shards, and ``fluxfs shard index``: index existing shards.

The work is done by `fluxfs.pipes.shards` (imported inside the commands: it pulls in torch);
here are the arguments, listing, labels, progress and the summary line.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from .base import UsageError, human, progress_bar, remote_path, url_of
from .storage import list_objects, make_fs, require_bucket


SHARD_USAGE = """\
fluxfs shard SRC_PREFIX DST_PATTERN [--max-size 256MB] [--max-samples N] [--manifest M | --no-labels]
                    [--seed S | --no-shuffle] [--part i/N | --part auto]
       fluxfs shard --merge DST_PATTERN
       fluxfs shard index SHARD_URL|PREFIX/ ... [--force]"""

SHARD_EPILOG = """\
Packing: every object under SRC_PREFIX becomes a member named by its key below the prefix
(cats/001.jpg -> sample cats/001, field jpg); objects sharing a key form one sample. Labels
(a .cls member) come from --manifest (key<TAB>label or JSON lines with "label") or else from
each object's parent directory; names are numbered in sorted order and listed in classes.txt
beside the shards. Samples are packed in an order shuffled by --seed (default 0), so each shard
holds a uniform sample of the prefix, not one class directory; --no-shuffle packs in key order.
DST_PATTERN numbers the shards: flux://b/train/shard-{:06d}.tar. Each shard appears only when
complete, followed by its index (SHARD.idx, which records the order and seed). Rerunning the
same command after an interruption skips the shards already written.

In parts: --part i/N packs only part i (from 0) of N, so N processes on any machines pack the
prefix together (--part auto: torchrun's RANK/WORLD_SIZE). Part i writes below
DIR/part-iiii-of-NNNN/ (DIR: DST_PATTERN's directory), every sample in exactly one part. The
first part to plan pins the listing (each object's generation), classes and order in
DIR/fluxfs-pack-parts.json; every part packs that listing, and one whose objects were replaced
or deleted since refuses, naming them. The last part to finish writes DIR/shards.jsonl listing
every part's shards (or run --merge DST_PATTERN).

Indexing: builds SHARD.idx for shards without one (any POSIX tar, e.g. written by webdataset or
tar) by reading their headers with ranged reads; a PREFIX/ indexes every .tar below it.
"""


def parse_size(text: str) -> int:
    """--max-size: the one size parser of fluxfs (options.parse_size: 256MB is 10^6-based, 256M and 256MiB
    2^20-based), at least 1 byte."""
    from ..options import parse_size as option_size  # here: fluxfs.options imports gcsfs, which --help never needs

    try:
        size = option_size("--max-size", text)
    except ValueError as e:
        raise UsageError(f"bad size {text!r}: {e}") from None
    if size < 1:
        raise UsageError(f"bad size {text!r}: must be at least 1 byte")
    return size


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("args", nargs="+", metavar="ARG", help="SRC_PREFIX DST_PATTERN, or: index URL...")
    p.add_argument("--max-size", default="256MB",
                   help="largest shard: bytes, or with a unit as every fluxfs size option takes it: "
                        "256MB (MB = 10^6 bytes), 64MiB or 64M (2^20 bytes); default 256MB")
    p.add_argument("--max-samples", type=int, default=1_000_000, help="most samples per shard (default 1,000,000)")
    p.add_argument("--manifest", default=None,
                   help="pack only the objects this manifest names, labelled as it says (local path or flux:// URL)")
    p.add_argument("--no-labels", action="store_true", help="no .cls members from parent directories")
    p.add_argument("--seed", type=int, default=None,
                   help="the seed of the packing order (default 0): samples are shuffled across shards")
    p.add_argument("--no-shuffle", action="store_true",
                   help="pack samples in key order (a folder per class then fills shards one class at a time)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace destination shards this packing did not write (default: refuse)")
    p.add_argument("--force", action="store_true", help="index: rebuild indexes that are up to date")
    p.add_argument("--part", default=None, metavar="i/N",
                   help="pack only part i (counted from 0) of N; auto: RANK/WORLD_SIZE as torchrun sets them")
    p.add_argument("--merge", action="store_true",
                   help="write DIR/shards.jsonl listing every part's shards (refused while some part is not complete)")


def cmd_shard(args: argparse.Namespace) -> int:
    """``fluxfs shard SRC DST`` (pack) or ``fluxfs shard index URL...``."""
    if args.part is not None and (args.merge or args.args[0] == "index"):
        raise UsageError("--part goes with packing (fluxfs shard SRC DST --part i/N), not with "
                         + ("--merge" if args.merge else "index"))
    if args.merge:
        if len(args.args) != 1:
            raise UsageError(f"fluxfs shard --merge takes DST_PATTERN (or its directory); got {len(args.args)} "
                             f"argument(s)")
        return _merge(args, args.args[0])
    if args.args[0] == "index":
        if len(args.args) < 2:
            raise UsageError("fluxfs shard index needs at least one shard URL or PREFIX/")
        return _index(args, args.args[1:])
    if len(args.args) != 2:
        raise UsageError(f"fluxfs shard takes SRC_PREFIX DST_PATTERN (or: index URL...); got {len(args.args)} "
                         f"argument(s)\nusage:\n{SHARD_USAGE}")
    return _pack(args, *args.args)


def _index(args: argparse.Namespace, urls: List[str]) -> int:
    from fluxfs.pipes.shards import ShardError
    from fluxfs.pipes.shards.indexer import build_index, load_index, write_index

    fs = make_fs(args)
    targets: List[str] = []
    for url in urls:
        path = remote_path(url)
        if url.endswith("/"):
            require_bucket(fs, path, url)
            found = sorted(i["name"] for i in list_objects(fs, path, args) if i["name"].endswith(".tar"))
            if not found:
                raise FileNotFoundError(f"no .tar shards under {url}")
            targets += [url_of(p, url) for p in found]
        else:
            targets.append(url)
    done = skipped = 0
    with progress_bar(args, total=len(targets), desc="indexing", unit=" shards") as bar:
        for url in targets:
            if not args.force:
                try:
                    load_index(fs, url, build_missing=False)
                    skipped += 1
                    bar.update(1)
                    continue
                except (FileNotFoundError, ShardError) as exc:
                    if "does not exist" in str(exc):
                        raise
            index = build_index(fs, url)
            write_index(fs, index)
            done += 1
            bar.update(1)
            if not args.quiet:
                print(f"{url}: {len(index.samples)} samples, {len(index.members)} members, {human(index.size)}",
                      file=sys.stderr)
    if not args.quiet:
        print(f"indexed {done} shard(s), {skipped} already up to date", file=sys.stderr)
    return 0


def _labels(fs, args: argparse.Namespace, src: str) -> Optional[Dict[str, Any]]:
    if args.manifest is None:
        return None
    from fluxfs.pipes.data.manifests import manifest_infos

    entries = manifest_infos(args.manifest, fs=fs if "://" in args.manifest else None, base=src)
    return {e["name"]: e.get("label") for e in entries}


def _part(args: argparse.Namespace) -> Optional[Tuple[int, int]]:
    from fluxfs.pipes.shards.parts import parse_part

    if args.part is None:
        return None
    try:
        return parse_part(args.part)
    except ValueError as exc:
        raise UsageError(f"--part: {exc}") from None


def _pack(args: argparse.Namespace, src: str, dst: str) -> int:
    from fluxfs.pipes.shards.packing import DEFAULT_SEED, check_destination, pack_prefix

    part = _part(args)
    if args.no_shuffle and args.seed is not None:
        raise UsageError("--seed orders a shuffled packing; --no-shuffle packs in key order: give one of them")
    world = os.environ.get("WORLD_SIZE", "")
    if part is None and world.isdigit() and int(world) > 1 and not args.quiet:
        print(f"fluxfs shard: WORLD_SIZE={world} is set but --part is not: this process packs everything; "
              f"--part auto shares the work among the {world} processes", file=sys.stderr)
    fs = make_fs(args)
    base = remote_path(src)
    max_size, t0 = parse_size(args.max_size), time.perf_counter()
    if not base.endswith("/"):
        base += "/"
    remote_path(dst)   # a bucket URL, or a usage error naming it
    try:
        check_destination(src, dst)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    require_bucket(fs, base, src)
    labels = _labels(fs, args, src)
    with progress_bar(args, total=0, desc="packing", unit="B", unit_scale=True) as bar:
        def start(total: int) -> None:
            bar.set_description("packing")
            bar.total = total
            bar.refresh()

        def wait(message: str) -> None:   # a part waiting for part 0's plan says so
            if not args.quiet:
                print(f"fluxfs shard: {message}", file=sys.stderr)
            bar.set_description("waiting for part 0's plan")

        res = pack_prefix(src, dst, part=part, max_size=max_size, max_samples=args.max_samples, labels=labels,
                          label_dirs=not args.no_labels, overwrite=args.overwrite, shuffle=not args.no_shuffle,
                          seed=DEFAULT_SEED if args.seed is None else args.seed, fs=fs, on_start=start,
                          on_object=bar.update, on_wait=wait)
    if not args.quiet:
        took = time.perf_counter() - t0
        share = "" if part is None or part[1] == 1 else f"part {part[0]}/{part[1]}: "
        order = "in key order" if res.seed is None else f"shuffled with seed {res.seed}"
        print(f"{share}packed {res.samples} samples ({order}; {res.objects} objects, {human(res.bytes_read)} read) "
              f"into {len(res.shards)} shard(s) in {took:.1f} s; {res.already} shard(s) were already complete",
              file=sys.stderr)
        if res.merged is not None:
            print(f"every part is complete: {url_of(res.merged, dst)} lists their shards", file=sys.stderr)
    return 0


def _merge(args: argparse.Namespace, dst: str) -> int:
    from fluxfs.pipes.shards.partfiles import merge_parts

    fs = make_fs(args)
    path = remote_path(dst)
    dst_dir = path.rstrip("/") if dst.endswith("/") else path.rpartition("/")[0]
    where = merge_parts(fs, dst_dir)
    if not args.quiet:
        print(f"merged: {url_of(where, dst)}", file=sys.stderr)
    return 0
