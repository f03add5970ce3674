"""`pack_prefix`: pack the objects under a prefix into shards, alone or as part i of N (`parts`), and `merge_parts`.

Listing, planning (`pack.plan_samples`/`plan_shards`), resuming (`pack.done_shards`) and writing
(`pack.pack`) for one machine's share; a part that finishes writes its manifest, and the last
one to finish (or `merge_parts`) writes the manifest of every part's shards.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import fsspec

from ..data.object_store import list_objects
from ..urls import parse_url
from .pack import COMPUTE, class_names, done_shards, member_name, object_label, pack, plan_samples, plan_shards
from .partfiles import forget_part, read_partition, settle_partition, try_merge, write_part_manifest
from .parts import Partition, check_part, choose_bounds, listing_ranges, part_pattern
from .samples import split_key
from .writer import DEFAULT_MAX_SAMPLES, DEFAULT_MAX_SIZE


@dataclass
class PackResult:
    """What one `pack_prefix` call did: shards planned and written, samples, objects and bytes of its share."""

    shards: list[str] = field(default_factory=list)
    written: int = 0
    already: int = 0
    samples: int = 0
    objects: int = 0
    bytes_read: int = 0
    classes: Optional[list[str]] = None
    merged: Optional[str] = None   # the merged manifest, when this part completed the set


def _keys(infos: list[dict], base: str) -> list[str]:
    return [split_key(member_name(i["name"][len(base):]))[0] for i in infos]


def _list_all(fs, base: str, labels: Optional[dict]) -> list[dict]:
    bucket, key = base.split("/", 1)
    infos = list(list_objects(fs, bucket, key))
    return [i for i in infos if i["name"] in labels] if labels is not None else infos


def _list_share(fs, base: str, part: Partition, i: int, labels: Optional[dict]) -> list[dict]:
    """The objects of part i's samples: only its key range is listed (plus the few ranges `listing_ranges` adds)."""
    bucket, key = base.split("/", 1)
    lo, hi = part.range(i)
    seen: dict[str, dict] = {}
    for prefix, start, end in listing_ranges(key, lo, hi):
        if hasattr(fs, "iter_objects"):
            batches = fs.iter_objects(bucket, prefix=prefix, start_offset=start, end_offset=end)
            rows = (info for batch in batches for info in batch)
        else:  # another fsspec filesystem: the prefix listed, the range kept here
            rows = (r for r in list_objects(fs, bucket, prefix)
                    if (start is None or r["name"] >= f"{bucket}/{start}")
                    and (end is None or r["name"] < f"{bucket}/{end}"))
        for info in rows:
            seen.setdefault(info["name"], info)
    infos = [seen[n] for n in sorted(seen) if labels is None or n in labels]
    return [info for info, k in zip(infos, _keys(infos, base)) if part.owns(i, k)]


def _plan_partition(base: str, n: int, infos: list[dict], labels: Optional[dict], label_dirs: bool) -> Partition:
    """The split of every object's samples into n parts of about equal bytes, with every part's class names."""
    classes = _all_classes(infos, base, labels, label_dirs)
    samples, _ = plan_samples(infos, base, labels, label_dirs, classes=classes)
    bounds = choose_bounds([s.key for s in samples], [s.span for s in samples], n)
    return Partition(base, n, tuple(bounds), None if classes is None else tuple(classes))


def _all_classes(infos: list[dict], base: str, labels: Optional[dict], label_dirs: bool) -> Optional[list[str]]:
    values = [v for v in (object_label(i, i["name"][len(base):], labels, label_dirs) for i in infos) if v is not None]
    return class_names(values) if values else None


def check_destination(src: str, dst: str) -> str:
    """The directory (``bucket/path``) of shard pattern `dst`; a ValueError naming it when it numbers no shard
    (``shard.tar``, ``{name}``) or lies inside the source prefix `src` (its shards would be packed again)."""
    try:
        first, second = dst.format(0), dst.format(1)
    except (IndexError, KeyError, ValueError):
        first = second = dst
    if first == second:
        raise ValueError(f"destination pattern {dst!r} needs a field for the shard number, e.g. shard-{{:06d}}.tar")
    base = parse_url(src).path.rstrip("/") + "/"
    dst_dir = parse_url(dst).path.rpartition("/")[0]
    if (dst_dir + "/").startswith(base):
        raise ValueError(f"the destination {dst} lies inside the source prefix {src}: shards would be packed again")
    return dst_dir


def pack_prefix(src: str, dst: str, *, part: Optional[tuple[int, int]] = None, max_size: int = DEFAULT_MAX_SIZE,
                max_samples: int = DEFAULT_MAX_SAMPLES, labels: Optional[dict[str, Any]] = None,
                label_dirs: bool = True, overwrite: bool = False, fs: Any = None,
                storage_options: Optional[dict] = None, plan_wait: float = 120.0,
                on_start: Optional[Callable[[int], None]] = None,
                on_object: Optional[Callable[[int], None]] = None) -> PackResult:
    """Pack the objects under `src` (a prefix URL) into shards named by `dst` (``flux://b/train/shard-{:06d}.tar``).

    `part=(i, N)`: pack only part i's share, into ``train/part-iiii-of-NNNN/shard-....tar`` (N=1 is the
    plain layout); N processes anywhere, each with its own i, pack the prefix together, every object
    exactly once, and the last to finish writes ``train/shards.jsonl`` listing every part's shards. The
    first part to plan fixes the split in ``train/fluxfs-pack-parts.json`` (part 0 does it at once, the
    others wait for it up to `plan_wait` seconds, then plan themselves: the first plan written wins).
    A rerun with the same arguments resumes: complete shards are skipped. `labels`: object name ->
    label (a manifest's; only those objects are packed); else `label_dirs` labels by parent directory.
    `on_start(bytes)`: called once the bytes to read are known; `on_object(bytes)` after each object.
    """
    i, n = check_part(part if part is not None else (0, 1))
    if fs is None:
        fs, _ = fsspec.core.url_to_fs(src, **(storage_options or {}))
    dst_dir = check_destination(src, dst)
    base = parse_url(src).path.rstrip("/") + "/"
    pattern = part_pattern(dst, i, n)
    classes: Any = COMPUTE
    if n == 1:
        infos = _list_all(fs, base, labels)
        if not infos:
            raise FileNotFoundError(f"no objects to pack under {src}" + (" named by the manifest" if labels else ""))
    else:
        partition = read_partition(fs, dst_dir, base, n, wait=0 if i == 0 else plan_wait)
        if partition is None:   # no part has planned yet: list everything once, fix the split
            everything = _list_all(fs, base, labels)
            if not everything:
                raise FileNotFoundError(f"no objects to pack under {src}" + (" named by the manifest" if labels
                                                                             else ""))
            partition = settle_partition(fs, dst_dir, _plan_partition(base, n, everything, labels, label_dirs))
            infos = [x for x, k in zip(everything, _keys(everything, base)) if partition.owns(i, k)]
        else:
            infos = _list_share(fs, base, partition, i, labels)
        classes = None if partition.classes is None else list(partition.classes)
    samples, classes = plan_samples(infos, base, labels, label_dirs, classes=classes)
    plan = plan_shards(samples, max_size, max_samples)
    urls = [pattern.format(k) for k in range(len(plan))]
    done = done_shards(fs, urls, plan, overwrite)
    todo = [k for k in range(len(plan)) if k not in done]
    if n > 1 and todo:
        forget_part(fs, dst_dir, i, n)
    if classes is not None:
        fs.pipe_file(dst_dir + "/classes.txt", "".join(c + "\n" for c in classes).encode())
    total = sum(int(x.get("size") or 0) for k in todo for s in plan[k] for _, x in s.objects)
    if on_start is not None:
        on_start(total)
    pack(fs, urls, plan, todo, on_object=on_object)
    result = PackResult(urls, len(todo), len(done), len(samples), len(infos), total, classes)
    if n > 1:
        write_part_manifest(fs, dst_dir, i, n, urls)
        result.merged = try_merge(fs, dst_dir, n)
    return result
