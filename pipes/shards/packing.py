"""`pack_prefix`: pack the objects under a prefix into shards, alone or as part i of N (`parts`), and `merge_parts`.

Listing (or, in parts, the listing pinned in the plan file), planning (`pack.plan_samples`,
`order_samples`, `plan_shards`), resuming (`pack.done_shards`) and writing (`pack.pack`) for one
machine's share; a part that finishes writes its manifest, and the last one to finish (or
`merge_parts`) writes the manifest of every part's shards.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import fsspec

from ..data.object_store import list_objects
from ..urls import parse_url
from .errors import SourceChangedError
from .pack import (COMPUTE, class_names, done_shards, object_label, order_samples, pack, plan_marker, plan_samples,
                   plan_shards)
from .partfiles import forget_part, read_partition, settle_partition, try_merge, write_part_manifest
from .parts import PARTITION_NAME, Partition, check_part, cuts, part_pattern
from .writer import DEFAULT_MAX_SAMPLES, DEFAULT_MAX_SIZE

logger = logging.getLogger(__name__)

DEFAULT_SEED = 0   # packing shuffles by default, the same way every time (a rerun resumes; parts agree)


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
    seed: Optional[int] = DEFAULT_SEED   # the seed the samples were shuffled with; None: key order


def _list_all(fs, base: str, labels: Optional[dict]) -> list[dict]:
    bucket, key = base.split("/", 1)
    infos = list(list_objects(fs, bucket, key))
    return [i for i in infos if i["name"] in labels] if labels is not None else infos


def _plan_partition(base: str, n: int, infos: list[dict], labels: Optional[dict], label_dirs: bool,
                    seed: Optional[int]) -> Partition:
    """The plan every part packs: the listing pinned (size, generation, crc32c), the class names and the seed."""
    classes = _all_classes(infos, base, labels, label_dirs)
    pins = sorted((i["name"][len(base):], int(i.get("size") or 0),
                   None if i.get("generation") in (None, "") else str(i["generation"]), i.get("crc32c") or None)
                  for i in infos)
    return Partition(base, n, None if classes is None else tuple(classes), seed, tuple(pins))


def _all_classes(infos: list[dict], base: str, labels: Optional[dict], label_dirs: bool) -> Optional[list[str]]:
    values = [v for v in (object_label(i, i["name"][len(base):], labels, label_dirs) for i in infos) if v is not None]
    return class_names(values) if values else None


def _pinned(fs, src: str, base: str, dst_dir: str, i: int, n: int, labels: Optional[dict], label_dirs: bool,
            seed: Optional[int], plan_wait: float, on_wait: Optional[Callable[[str], None]]) -> Partition:
    """The plan of a packing in n parts: read from the destination, or (none yet) listed here and pinned there,
    create-only, so when several parts plan at once the first write wins and every part packs that one."""
    partition = read_partition(fs, dst_dir, base, n, seed)
    if partition is None and i != 0 and plan_wait > 0:
        msg = (f"part {i}/{n}: waiting up to {plan_wait:g} s for part 0 to pin the source's listing in "
               f"{dst_dir}/{PARTITION_NAME}")
        logger.debug(msg)
        if on_wait is not None:
            on_wait(msg)
        partition = read_partition(fs, dst_dir, base, n, seed, wait=plan_wait)
    if partition is None:   # no part has planned yet: list everything once, pin it
        everything = _list_all(fs, base, labels)
        if not everything:
            raise FileNotFoundError(f"no objects to pack under {src}" + (" named by the manifest" if labels else ""))
        partition = settle_partition(fs, dst_dir, _plan_partition(base, n, everything, labels, label_dirs, seed))
    return partition


def check_pins(fs, base: str, infos: Sequence[dict], where: str, who: str) -> None:
    """A `SourceChangedError` naming the objects of `infos` (pinned in `where`) replaced or deleted since: packing
    them would mix two listings. One listing of the source tells (by generation; by size where none is pinned)."""
    bucket, key = base.split("/", 1)
    now = {r["name"]: r for r in list_objects(fs, bucket, key)}

    def same(pin: dict, cur: dict) -> bool:
        if pin.get("generation") is not None:
            return str(cur.get("generation")) == str(pin["generation"])
        return int(cur.get("size") or 0) == int(pin.get("size") or 0)

    gone = [i["name"] for i in infos if i["name"] not in now]
    replaced = [i["name"] for i in infos if i["name"] in now and not same(i, now[i["name"]])]
    if not gone and not replaced:
        return

    def named(what: str, names: list[str]) -> str:
        return f"{what}: " + ", ".join(n[len(base):] for n in names[:5]) + (" ..." if len(names) > 5 else "")

    shown = "; ".join(named(what, names) for what, names in (("replaced", replaced), ("deleted", gone)) if names)
    raise SourceChangedError(
        f"the source {base} changed since this packing pinned its listing in {where}: {len(replaced) + len(gone)} "
        f"of {who}'s {len(infos)} objects were replaced or deleted ({shown}); their shards would mix two listings, "
        f"so nothing was written. Pack again into a new destination (or delete the old one's files first)",
        replaced + gone)


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
                label_dirs: bool = True, overwrite: bool = False, shuffle: bool = True, seed: int = DEFAULT_SEED,
                fs: Any = None, storage_options: Optional[dict] = None, plan_wait: float = 120.0,
                on_start: Optional[Callable[[int], None]] = None,
                on_object: Optional[Callable[[int], None]] = None,
                on_wait: Optional[Callable[[str], None]] = None) -> PackResult:
    """Pack the objects under `src` (a prefix URL) into shards named by `dst` (``flux://b/train/shard-{:06d}.tar``).

    Samples are packed in an order shuffled by `seed` (`shuffle=False`: key order), so each shard holds a
    uniform sample of the prefix (a folder per class does not become a class per shard); the order is
    recorded in each shard's index. `part=(i, N)`: pack only part i's share, into
    ``train/part-iiii-of-NNNN/shard-....tar`` (N=1 is the plain layout); N processes anywhere, each with its
    own i, pack one listing together, every object exactly once, and the last to finish writes
    ``train/shards.jsonl`` listing every part's shards. The first part to plan pins the listing (each
    object's generation), the classes and the seed in ``train/fluxfs-pack-parts.json`` (part 0 does it at
    once, the others wait for it up to `plan_wait` seconds, calling `on_wait(message)`, then plan
    themselves: the first plan written wins); a part whose pinned objects were replaced or deleted since
    is a `SourceChangedError` naming them, before it writes anything. A rerun with the same arguments
    resumes: complete shards are skipped. `labels`: object name -> label (a manifest's; only those
    objects are packed); else `label_dirs` labels by parent directory. `on_start(bytes)`: called once the
    bytes to read are known; `on_object(bytes)` after each object.
    """
    i, n = check_part(part if part is not None else (0, 1))
    if shuffle and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"seed must be a whole number, not {seed!r}")
    order = seed if shuffle else None
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
        hint = ("pack again to pack the objects as they are now (a shard written from the old listing is then "
                "refused: --overwrite, overwrite=True, replaces it)")
    else:
        partition = _pinned(fs, src, base, dst_dir, i, n, labels, label_dirs, order, plan_wait, on_wait)
        infos = partition.infos()
        classes = None if partition.classes is None else list(partition.classes)
        hint = (f"this packing's listing is pinned in {dst_dir}/{PARTITION_NAME}: pack again into a new "
                f"destination")
    samples, classes = plan_samples(infos, base, labels, label_dirs, classes=classes)
    samples = order_samples(samples, order)
    if n > 1:
        at = cuts([s.span for s in samples], n)
        samples = samples[at[i]:at[i + 1]]
    plan = plan_shards(samples, max_size, max_samples)
    markers = [plan_marker(shard, order) for shard in plan]
    urls = [pattern.format(k) for k in range(len(plan))]
    done = done_shards(fs, urls, markers, overwrite)
    todo = [k for k in range(len(plan)) if k not in done]
    if n > 1 and todo:
        check_pins(fs, base, [x for k in todo for s in plan[k] for _, x in s.objects], f"{dst_dir}/{PARTITION_NAME}",
                   f"part {i}/{n}")
        forget_part(fs, dst_dir, i, n)
    if classes is not None:
        fs.pipe_file(dst_dir + "/classes.txt", "".join(c + "\n" for c in classes).encode())
    total = sum(int(x.get("size") or 0) for k in todo for s in plan[k] for _, x in s.objects)
    if on_start is not None:
        on_start(total)
    pack(fs, urls, plan, todo, markers, on_object=on_object, changed_hint=hint)
    result = PackResult(urls, len(todo), len(done), len(samples), sum(len(s.objects) for s in samples), total,
                        classes, seed=order)
    if n > 1:
        write_part_manifest(fs, dst_dir, i, n, urls)
        result.merged = try_merge(fs, dst_dir, n)
    return result
