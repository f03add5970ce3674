"""Object versioning: noncurrent generations of a bucket with ``versioning.enabled`` and the
``versions=true`` listing that shows them beside the live objects.

A versioned bucket keeps an overwritten or deleted object as noncurrent (``Obj.deleted`` set: its
``timeDeleted``) until it is deleted by generation. Listings with versions give every generation of
a name, oldest first, the live one last; a page may end between two generations of one name, so the
resume point is (name, generation).
"""
from __future__ import annotations

import heapq
import time
from typing import Any, Iterator, List, Optional, Tuple

from .buckets import Bucket
from .objects import Obj


def retire(b: Bucket, obj: Obj) -> None:
    """Keep ``obj`` (just replaced or deleted) as a noncurrent generation of its name."""
    obj.deleted = time.time()
    obj._json = None  # its resource gains timeDeleted
    b.noncurrent.setdefault(obj.name, []).append(obj)


def find(b: Bucket, name: str, generation: int) -> Optional[Obj]:
    """The noncurrent generation ``generation`` of ``name``, or None."""
    for o in b.noncurrent.get(name, ()):
        if o.generation == generation:
            return o
    return None


def forget(b: Bucket, obj: Obj) -> None:
    """Drop a noncurrent generation for good."""
    gens = b.noncurrent.get(obj.name)
    if gens is not None:
        gens.remove(obj)
        if not gens:
            del b.noncurrent[obj.name]


def _names(b: Bucket, start: str) -> Iterator[str]:
    """Every name with a live or noncurrent generation, from ``start`` on, in order, once each."""
    last = None
    for key in heapq.merge(b.objects.irange(minimum=start), b.noncurrent.irange(minimum=start)):
        if key != last:
            last = key
            yield key


def _generations(b: Bucket, name: str) -> List[Tuple[str, Any]]:
    """(name, Obj or SynthBatch) index entries of every generation of ``name``, oldest first."""
    out: List[Tuple[str, Any]] = [(name, o) for o in b.noncurrent.get(name, ())]
    live = b.objects.get(name)
    if live is not None:
        out.append((name, live))
    return out


def _generation(entry: Tuple[str, Any]) -> int:
    return entry[1].generation


def list_versions(b: Bucket, prefix: str, delimiter: str, start_offset: str, end_offset: str,
                  resume: Optional[Tuple[str, int]], max_results: int
                  ) -> Tuple[List[Tuple[str, Any]], List[str], Optional[Tuple[str, int]]]:
    """One page of a ``versions=true`` listing: (entries, prefixes, (name, generation) to resume at or None)."""
    rname, rgen = resume if resume else ("", 0)
    start = max(prefix, start_offset, rname)
    items: List[Tuple[str, Any]] = []
    prefixes: List[str] = []
    n = 0
    while True:
        jumped = False
        for key in _names(b, start):
            if (end_offset and key >= end_offset) or not key.startswith(prefix):
                return items, prefixes, None
            if delimiter:
                i = key.find(delimiter, len(prefix))
                if i >= 0:
                    if n >= max_results:
                        return items, prefixes, (key, 0)
                    p = key[:i + len(delimiter)]
                    prefixes.append(p)
                    n += 1
                    start = p[:-1] + chr(ord(p[-1]) + 1)  # past every name under p
                    jumped = True
                    break
            for entry in _generations(b, key):
                if key == rname and _generation(entry) < rgen:
                    continue  # listed on an earlier page
                if n >= max_results:
                    return items, prefixes, (key, _generation(entry))
                items.append(entry)
                n += 1
        if not jumped:
            return items, prefixes, None
