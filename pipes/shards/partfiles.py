"""The files a packing in parts keeps beside its shards: the plan (partition), each part's manifest, the merged one.

The plan file (the pinned listing, classes and order) is written create-only (ifGenerationMatch=0), so
when several parts plan at once the first write wins and every part uses that one. A part's manifest
(JSON lines, one per shard, with size and generation) is written once the part's shards are all
complete: it is what "this part is done" means (a part that starts writing shards removes its
manifest, and the merged one, from an earlier run). The merged
manifest (`parts.MERGED_NAME`) lists every part's shards in part order, each exactly once.
"""
from __future__ import annotations

import time
from typing import Optional, Sequence

from fluxfs.support import manifest_line

from ..data.manifests import manifest_infos
from ..data.object_store import list_objects, lookup_objects
from ..errors import PipesError
from ..urls import parse_url
from .parts import MERGED_NAME, PARTITION_NAME, Partition, part_name


class IncompletePackError(PipesError, FileNotFoundError):
    """Some parts of a packing have not finished: `missing` are their numbers."""

    def __init__(self, message: str, missing: Sequence[int]):
        super().__init__(message)
        self.missing = list(missing)

    def __reduce__(self):  # DataLoader workers and process pools hand errors over pickled
        return type(self), (str(self), self.missing)


def load_partition(fs, dst_dir: str) -> Partition:
    """The partition file of the packing writing to `dst_dir` ("bucket/dir"); FileNotFoundError when none."""
    where = f"{dst_dir}/{PARTITION_NAME}"
    try:
        data = fs.cat_file(where)
    except FileNotFoundError:
        raise FileNotFoundError(f"no packing in parts writes to {dst_dir}/ ({where} does not exist)") from None
    return Partition.from_bytes(where, data)


def _order(seed: Optional[int]) -> str:
    return "key order (--no-shuffle)" if seed is None else f"shuffled with seed {seed}"


def _check(part: Partition, dst_dir: str, base: str, n: int, seed: Optional[int]) -> Partition:
    where = f"{dst_dir}/{PARTITION_NAME}"
    if part.source != base:
        raise ValueError(f"{where}: this destination holds a packing of {part.source}, not of {base}: "
                         f"choose another destination")
    if part.parts != n:
        raise ValueError(f"{where}: this destination's packing is split into {part.parts} parts, not {n}: "
                         f"run its parts as i/{part.parts}, or choose another destination")
    if part.seed != seed:
        raise ValueError(f"{where}: this destination's packing orders samples {_order(part.seed)}, not "
                         f"{_order(seed)}: run every part with the same order options, or choose another destination")
    return part


def read_partition(fs, dst_dir: str, base: str, n: int, seed: Optional[int], wait: float = 0.0) -> Optional[Partition]:
    """The plan of `dst_dir`, checked against the source `base`, `n` parts and the order's `seed`; None if,
    after up to `wait` seconds of polling, there is none yet."""
    deadline, pause = time.monotonic() + wait, 0.2
    while True:
        try:
            return _check(load_partition(fs, dst_dir), dst_dir, base, n, seed)
        except FileNotFoundError:
            if time.monotonic() >= deadline:
                return None
        time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(2 * pause, 1.0)


def settle_partition(fs, dst_dir: str, planned: Partition) -> Partition:
    """Write `planned` unless another part wrote a partition first; returns the one every part uses."""
    try:
        fs.pipe_file(f"{dst_dir}/{PARTITION_NAME}", planned.to_bytes(), mode="create")
        return planned
    except FileExistsError:
        return _check(load_partition(fs, dst_dir), dst_dir, planned.source, planned.parts, planned.seed)


def manifest_path(dst_dir: str, i: int, n: int) -> str:
    return f"{dst_dir}/{part_name(i, n)}.jsonl"


def forget_part(fs, dst_dir: str, i: int, n: int) -> None:
    """Part i is about to write shards: its manifest (and the merged one) from an earlier run no longer hold."""
    for where in (manifest_path(dst_dir, i, n), f"{dst_dir}/{MERGED_NAME}"):
        try:
            fs.rm_file(where)
        except FileNotFoundError:
            pass


def write_part_manifest(fs, dst_dir: str, i: int, n: int, urls: Sequence[str]) -> str:
    """Record part i as complete: its shards (`urls`, all written) with their sizes and generations."""
    bucket, key = f"{dst_dir}/{part_name(i, n)}/".split("/", 1)
    found = {r["name"]: r for r in list_objects(fs, bucket, key)}
    lines = []
    for url in urls:
        path = parse_url(url).path
        if path not in found:
            raise FileNotFoundError(f"{url} was written but is not listed: part {i}/{n} is not complete")
        lines.append(manifest_line(found[path]))
    where = manifest_path(dst_dir, i, n)
    fs.pipe_file(where, "".join(lines).encode())
    return where


def merge_parts(fs, dst_dir: str, protocol: str = "flux") -> str:
    """Write `dst_dir`/shards.jsonl listing every part's shards; an incomplete part is an IncompletePackError
    naming it, a shard gone or replaced since its part finished a FileNotFoundError naming it."""
    part = load_partition(fs, dst_dir)
    n = part.parts
    paths = [manifest_path(dst_dir, i, n) for i in range(n)]
    found = lookup_objects(fs, paths)
    missing = [i for i, p in enumerate(paths) if p not in found]
    if missing:
        shown = ", ".join(f"{i}/{n}" for i in missing[:10]) + (" ..." if len(missing) > 10 else "")
        raise IncompletePackError(
            f"cannot merge {dst_dir}/: {len(missing)} of {n} parts are not complete (part {shown}; no "
            f"{paths[missing[0]]}): run them (the same command with --part i/{n}), then merge", missing)
    bucket, key = f"{dst_dir}/part-".split("/", 1)
    listed = {r["name"]: r for r in list_objects(fs, bucket, key)}
    lines = []
    for p in paths:
        for row in manifest_infos(f"{protocol}://{p}", fs=fs):
            now = listed.get(row["name"])
            if now is None or str(now.get("generation")) != str(row.get("generation")):
                raise FileNotFoundError(f"{row['name']} (listed in {p}) is gone or was replaced after its part "
                                        f"finished: run that part again, then merge")
            lines.append(manifest_line(now))
    where = f"{dst_dir}/{MERGED_NAME}"
    fs.pipe_file(where, "".join(lines).encode())
    return where


def try_merge(fs, dst_dir: str, n: int) -> Optional[str]:
    """Merge when every part is complete (the last part to finish does it); None while some are not."""
    try:
        return merge_parts(fs, dst_dir)
    except IncompletePackError:
        return None
