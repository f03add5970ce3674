"""Pack existing objects into shards (`fluxfs shard SRC DST`): a plan fixed by the listing, so a rerun resumes.

Objects become members named by their key below the source prefix (``cats/001.jpg``: sample
``cats/001``, field ``jpg``), grouped by sample key, optionally with a ``.cls`` label member. Samples
are packed in an order shuffled by a seed (`order_samples`: a folder per class would otherwise make
one class per shard, which no read-time shuffle buffer undoes), or in key order. Which samples go
into which shard follows from that order and their sizes alone, before a byte is read; each finished
shard's index records the plan (first and last key, order, seed, a digest of its objects' names and
generations), so a rerun skips shards already complete and refuses to overwrite shards some other
packing wrote. Objects are read with the filesystem's batched (compose, generation-pinned) reads,
streamed in order within a memory budget, and checked against the listed size and crc32c: an object
changed since it was listed is a `SourceChangedError`, never packed.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from fluxfs.handle import accelerated
from fluxfs.support import crc32c, crc_from_b64

from .errors import SourceChangedError
from .index import ShardIndex, index_path
from .samples import split_key
from .tarformat import END_OF_ARCHIVE
from .writer import ShardFile, member_span, starts_new_shard

PLAN_KEY = "packed"
COMPUTE = "compute"   # plan_samples: number the classes found (the default, one packing on one machine)


@dataclass
class PlannedSample:
    """One sample to pack: its key, the objects that are its members, and label bytes, if any."""

    key: str
    objects: list[tuple[str, dict]] = field(default_factory=list)   # (member name, object info)
    label: Optional[bytes] = None

    @cached_property
    def span(self) -> int:
        """Bytes the sample takes in a shard (planned once: headers are costly to make)."""
        n = sum(member_span(name, int(info.get("size") or 0)) for name, info in self.objects)
        return n + (member_span(self.key + ".cls", len(self.label)) if self.label is not None else 0)


def member_name(rel: str) -> str:
    """The member name of an object keyed `rel` below the prefix; a file name without a dot gets ``.bin``."""
    return rel if split_key(rel)[1] else rel + ".bin"


def object_label(info: dict, rel: str, labels: Optional[dict[str, Any]], label_dirs: bool) -> Any:
    """An object's label: from `labels` (object name -> label, a manifest's) or else its parent directory."""
    if labels is not None:
        return labels.get(info["name"])
    return rel.rsplit("/", 2)[-2] if label_dirs and "/" in rel else None


def class_names(values: Iterable[Any]) -> Optional[list[str]]:
    """The sorted class names of label values, or None when every label is an int (written as it is)."""
    values = list(values)
    if all(isinstance(v, int) for v in values):
        return None
    return sorted({str(v) for v in values})


def plan_samples(infos: Sequence[dict], base: str, labels: Optional[dict[str, Any]] = None,
                 label_dirs: bool = True, classes: Any = COMPUTE) -> tuple[list[PlannedSample], Optional[list[str]]]:
    """Samples from object infos below `base` ("bucket/prefix/"), sorted by key; and the class names, if
    labels are names (then ``.cls`` holds each name's position in that sorted list).

    Labels come from `labels` (object name -> label, from a manifest) or else, with `label_dirs`,
    from each object's parent directory. `classes`: the class names fixed beforehand (one part of a
    packing numbers labels as all parts do), None for int labels; a label outside them is a ValueError.
    """
    by_key: dict[str, PlannedSample] = {}
    raw_labels: dict[str, Any] = {}
    members: dict[str, str] = {}
    for info in infos:
        rel = info["name"][len(base):]
        name = member_name(rel)
        if name in members:
            raise ValueError(f"{members[name]} and {info['name']} would both be member {name!r} of one sample "
                             f"(a name without an extension gets .bin): rename one")
        members[name] = info["name"]
        key, ext = split_key(name)
        sample = by_key.setdefault(key, PlannedSample(key))
        sample.objects.append((name, info))
        label = object_label(info, rel, labels, label_dirs)
        if label is not None:
            if ext == "cls":
                raise ValueError(f"{info['name']} is itself a .cls member: it cannot also get a label")
            if raw_labels.get(key, label) != label:
                raise ValueError(f"sample {key!r} has objects with different labels ({raw_labels[key]!r}, {label!r})")
            raw_labels[key] = label
    if classes is COMPUTE:
        classes = class_names(raw_labels.values()) if raw_labels else None
    if raw_labels:
        if classes is None:
            bad = next((v for v in raw_labels.values() if not isinstance(v, int)), None)
            if bad is not None:
                raise ValueError(f"label {bad!r} is not a number, but the packing's labels were all numbers "
                                 f"when it was planned: pack again to a new destination")
            encode = str
        else:
            position = {c: n for n, c in enumerate(classes)}
            missing = sorted({str(v) for v in raw_labels.values()} - set(position))
            if missing:
                raise ValueError(f"labels {missing[:5]} are not among the {len(classes)} classes the packing "
                                 f"planned (objects added since?): pack again to a new destination")
            encode = lambda v: str(position[str(v)])  # noqa: E731
        for key, label in raw_labels.items():
            by_key[key].label = encode(label).encode()
    samples = [by_key[k] for k in sorted(by_key)]
    for s in samples:
        s.objects.sort(key=lambda t: t[0])
    return samples, classes


def order_samples(samples: Sequence[PlannedSample], seed: Optional[int]) -> list[PlannedSample]:
    """Samples in packing order: key order when `seed` is None, else sorted by a keyed hash of their keys
    (a uniform shuffle that depends only on the seed and the keys, on every machine and Python)."""
    if seed is None:
        return sorted(samples, key=lambda s: s.key)
    salt = f"{int(seed)}\0".encode()
    return sorted(samples, key=lambda s: hashlib.blake2b(salt + s.key.encode("utf-8", "surrogatepass"),
                                                         digest_size=16).digest())


def plan_shards(samples: Sequence[PlannedSample], max_size: int, max_samples: int) -> list[list[PlannedSample]]:
    """Samples cut into shards by the same rule `ShardWriter` follows."""
    shards: list[list[PlannedSample]] = []
    size = 0
    for s in samples:
        span = s.span
        if not shards or starts_new_shard(size, len(shards[-1]), span, max_size, max_samples):
            shards.append([])
            size = 0
        shards[-1].append(s)
        size += span
    return shards


def plan_marker(shard: Sequence[PlannedSample], seed: Optional[int]) -> dict:
    """What a shard's index records of the plan: a rerun keeps the shard only if the plan is the same, the
    same objects (names and generations) in the same order included."""
    digest = hashlib.sha256()
    for s in shard:
        for _, info in s.objects:
            digest.update(f"{info['name']}\0{info.get('generation')}\0{info.get('size')}\n".encode("utf-8",
                                                                                                  "surrogatepass"))
    return {"first": shard[0].key, "last": shard[-1].key, "samples": len(shard),
            "bytes": sum(s.span for s in shard) + len(END_OF_ARCHIVE),
            "order": "key" if seed is None else "shuffled", "seed": seed, "objects": digest.hexdigest()}


def done_shards(fs, urls: Sequence[str], markers: Sequence[dict], overwrite: bool) -> set[int]:
    """Shards of the plan already complete (their index carries this plan's marker and matches the object).

    A shard that exists but was not written by this plan is a FileExistsError unless `overwrite`.
    """
    def check(n: int) -> bool:
        url = urls[n]
        path = fs._strip_protocol(url)
        try:
            info = fs.info(path)
        except FileNotFoundError:
            return False
        try:
            index = ShardIndex.from_bytes(url, fs.cat_file(index_path(path)))
            gen = info.get("generation")
            index.check_current(int(info["size"]), None if gen is None else str(gen))
            if index.extra.get(PLAN_KEY) == markers[n]:
                return True
        except (FileNotFoundError, ValueError):
            pass
        if overwrite:
            return False
        raise FileExistsError(f"{url} exists and is not this packing's shard {n} (no index, or one for other "
                              f"samples, another order, or objects changed since it was written): choose another "
                              f"destination, delete it, or pass --overwrite")

    with ThreadPoolExecutor(16) as pool:
        return {n for n, ok in zip(range(len(urls)), pool.map(check, range(len(urls)))) if ok}


def _object_bytes(fs, infos: list[dict], buffer_bytes: int) -> Iterator[bytes]:
    """Each object's bytes in the order of `infos`: batched reads streamed within `buffer_bytes`."""
    flux = accelerated(fs)  # a cache in front of flux reads through the cache instead
    if flux is not None:
        pos = 0
        for batch in flux.iter_cat_objects(infos, on_error="return", buffer_bytes=buffer_bytes):
            while pos < len(infos) and infos[pos]["name"] in batch:
                data = batch.pop(infos[pos]["name"])
                if isinstance(data, FileNotFoundError):  # ObjectChanged too: the listed generation is gone
                    name = infos[pos]["name"]
                    raise SourceChangedError(f"{name} was overwritten or deleted since it was listed", [name]) from data
                if isinstance(data, BaseException):
                    raise data
                pos += 1
                yield data
    else:
        for info in infos:
            try:
                yield fs.cat_file(info["name"])
            except FileNotFoundError as exc:
                raise SourceChangedError(f"{info['name']} was deleted since it was listed", [info["name"]]) from exc


def pack(fs, urls: Sequence[str], plan: Sequence[Sequence[PlannedSample]], todo: Sequence[int],
         markers: Sequence[dict], *, buffer_bytes: int = 128 * 2**20, on_object: Optional[Callable[[int], None]] = None,
         changed_hint: str = "list again and rerun") -> list[ShardIndex]:
    """Write shards `todo` of the plan (to `urls`, recording `markers` in their indexes), reading their objects
    in order; returns their indexes.

    A finished shard completes (its upload, then its index) on a background thread while the next
    one is written: at most one shard is completing, so memory stays two shards' upload buffers. An object
    changed since it was listed is a `SourceChangedError` (its message ends with `changed_hint`); the shard
    being written is aborted, so nothing of it appears.
    """
    infos = [info for n in todo for s in plan[n] for _, info in s.objects]
    data = _object_bytes(fs, infos, buffer_bytes)
    written: list[ShardIndex] = []
    closing: Optional[Future] = None
    with ThreadPoolExecutor(1, thread_name_prefix="fluxfs-shard-close") as closer:
        try:
            for n in todo:
                shard = ShardFile(fs, fs._strip_protocol(urls[n]), urls[n], extra={PLAN_KEY: markers[n]})
                try:
                    try:
                        _fill(shard, plan[n], data, on_object)
                    except SourceChangedError as exc:
                        raise SourceChangedError(f"{exc}: nothing of {urls[n]} was kept; {changed_hint}",
                                                 exc.keys) from exc
                    if closing is not None:
                        written.append(closing.result())
                        closing = None
                except BaseException:
                    shard.abort()
                    raise
                closing = closer.submit(shard.close)
            if closing is not None:
                written.append(closing.result())
                closing = None
        finally:
            if closing is not None:  # an error elsewhere: let the shard being completed finish or fail
                concurrent.futures.wait([closing])
    return written


def _fill(shard: ShardFile, samples: Sequence[PlannedSample], data: Iterator[bytes],
          on_object: Optional[Callable[[int], None]]) -> None:
    for sample in samples:
        for name, info in sample.objects:
            blob = next(data)
            why = changed(info, blob)
            if why:
                raise SourceChangedError(f"{info['name']} changed since it was listed ({why})", [info["name"]])
            shard.add(name, blob)
            if on_object is not None:
                on_object(len(blob))
        if sample.label is not None:
            shard.add(sample.key + ".cls", sample.label)


def changed(info: dict, blob: bytes) -> Optional[str]:
    """How `blob` differs from the object `info` listed (size, then crc32c when listed), or None."""
    size = int(info.get("size") or 0)
    if len(blob) != size:
        return f"{len(blob)} bytes, listed {size}"
    crc = info.get("crc32c")
    if crc and crc32c(blob) != crc_from_b64(crc):
        return "other bytes of the same size: its crc32c differs from the listed one"
    return None
