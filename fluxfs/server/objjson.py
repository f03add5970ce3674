"""JSON text of object resources, built field by field and cached: the server's list and GET hot path.

Building the full resource dict, filtering it by ``fields=`` and encoding it cost ~10-20 us per
object, i.e. most of a 1,000-item list page. Here a flat field selection (``items(name,size)``, or
none = the whole resource) maps to per-field encoders that emit JSON text directly; the text is
cached on stored objects (``Obj._json``, dropped on change) and, for unmaterialized synthetic
objects, kept as a per-batch template around the few fields that differ (``SynthBatch.json_tpl``).
Output is byte-identical to ``json.dumps(apply_fields(obj.resource(...), tree), separators=(",", ":"))``.
"""
from __future__ import annotations

import re
from functools import lru_cache
from json.encoder import encode_basestring_ascii as _s  # what json.dumps uses for str (ensure_ascii)
from typing import Any, Callable, Dict, Iterable, Optional, Tuple
from urllib.parse import quote

from .fields import apply_fields
from .replies import compact_json
from .objects import Obj, SynthBatch
from .timestamps import rfc3339

# Field order of Obj.resource() (the order of keys when no fields= selection is given).
_FULL = ("kind", "id", "selfLink", "mediaLink", "name", "bucket", "generation", "metageneration", "contentType",
         "storageClass", "size", "crc32c", "md5Hash", "etag", "timeCreated", "timeStorageClassUpdated", "updated",
         "timeDeleted", "componentCount", "metadata", "*extra")

# Each encoder: (obj, bucket, base_url) -> JSON text of the value, or None when the field is absent.
Enc = Callable[[Obj, str, str], Optional[str]]


# Names made of these characters quote to themselves but for '/' (urllib's quote walks every byte).
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.~/-]*\Z")


@lru_cache(maxsize=1024)  # selfLink and mediaLink of one object quote the same name back to back
def _quoted(name: str) -> str:
    if _PLAIN_NAME.match(name):
        return name.replace("/", "%2F")
    return quote(name, safe="")


def _self_link(o: Obj, b: str, base: str) -> str:
    return _s(f"{base}/storage/v1/b/{b}/o/{_quoted(o.name)}")


def _media_link(o: Obj, b: str, base: str) -> str:
    return _s(f"{base}/download/storage/v1/b/{b}/o/{_quoted(o.name)}?generation={o.generation}&alt=media")


def _name_enc(o: Obj, b: str, base: str) -> str:
    return _s(o.name)


def _md5(o: Obj, b: str, base: str) -> Optional[str]:
    m = o.md5
    return None if m is None else _s(m)


_ENCODERS: Dict[str, Enc] = {
    "kind": lambda o, b, base: '"storage#object"',
    "id": lambda o, b, base: _s(f"{b}/{o.name}/{o.generation}"),
    "selfLink": _self_link,
    "mediaLink": _media_link,
    "name": _name_enc,
    "bucket": lambda o, b, base: _s(b),
    "generation": lambda o, b, base: f'"{o.generation}"',
    "metageneration": lambda o, b, base: f'"{o.metageneration}"',
    "contentType": lambda o, b, base: _s(o.content_type),
    "storageClass": lambda o, b, base: '"STANDARD"',
    "size": lambda o, b, base: f'"{o.size}"',
    "crc32c": lambda o, b, base: _s(o.crc32c),
    "md5Hash": _md5,
    "etag": lambda o, b, base: _s(o.etag),
    "timeCreated": lambda o, b, base: _s(rfc3339(o.created)),
    "timeStorageClassUpdated": lambda o, b, base: _s(rfc3339(o.created)),
    "updated": lambda o, b, base: _s(rfc3339(o.updated)),
    "timeDeleted": lambda o, b, base: None if o.deleted is None else _s(rfc3339(o.deleted)),
    "componentCount": lambda o, b, base: None if o.component_count is None else compact_json(o.component_count),
    "metadata": lambda o, b, base: compact_json(o.metadata) if o.metadata else None,
}


def _extra(name: str) -> Enc:
    def enc(o: Obj, b: str, base: str) -> Optional[str]:
        ex = o.extra
        return compact_json(ex[name]) if ex and name in ex else None
    return enc


def _all_extra(o: Obj, b: str, base: str) -> Optional[str]:
    # The full resource ends with every extra field, in the object's own order (see Obj.resource).
    ex = o.extra
    if not ex:
        return None
    return ",".join(_s(k) + ":" + compact_json(v) for k, v in ex.items())


@lru_cache(maxsize=256)
def _plan(fields: Optional[Tuple[str, ...]]) -> Tuple[Tuple[str, Enc], ...]:
    """(JSON key prefix, encoder) per selected field; None = the whole resource."""
    plan = []
    for f in _FULL if fields is None else fields:
        if f == "*extra" and fields is None:
            plan.append(("", _all_extra))
        elif f in _ENCODERS:
            plan.append((_s(f) + ":", _ENCODERS[f]))
        else:  # extra fields (contentEncoding, ...) and unknown names (absent, as apply_fields leaves them)
            plan.append((_s(f) + ":", _extra(f)))
    return tuple(plan)


def flat_fields(tree: Optional[Dict[str, Any]]) -> Tuple[bool, Optional[Tuple[str, ...]]]:
    """(fast path usable?, field names): a selection without nested parts, or none at all."""
    if tree is None:
        return True, None
    if all(v is None for v in tree.values()):
        return True, tuple(tree)
    return False, None


def object_json(obj: Obj, bucket: str, base: str, tree: Optional[Dict[str, Any]]) -> str:
    """JSON text of ``obj``'s resource restricted to the fields tree (None = all), cached on the object."""
    ok, fields = flat_fields(tree)
    if not ok:  # nested selections (e.g. metadata/key): the generic path, not cached
        return compact_json(apply_fields(obj.resource(bucket, base, tree), tree))
    return _render(obj, bucket, base, fields, _plan(fields))


def objects_json(objs: Iterable[Obj], bucket: str, base: str, tree: Optional[Dict[str, Any]]) -> str:
    """JSON text of a list of object resources (a list page's ``items``), each restricted to ``tree``."""
    ok, fields = flat_fields(tree)
    if not ok:
        return compact_json([apply_fields(o.resource(bucket, base, tree), tree) for o in objs])
    plan = _plan(fields)
    return "[" + ",".join([_render(o, bucket, base, fields, plan) for o in objs]) + "]"


def entries_json(entries: Iterable[Tuple[str, Any]], bucket: str, base: str, tree: Optional[Dict[str, Any]]) -> str:
    """Like objects_json for ``Store.list(raw=True)`` entries: (name, Obj or SynthBatch)."""
    ok, fields = flat_fields(tree)
    if not ok:
        return objects_json([_view(n, v) for n, v in entries], bucket, base, tree)
    plan = _plan(fields)
    out = []
    for name, v in entries:
        if v.__class__ is SynthBatch:
            out.append(_render_synth(name, v, bucket, base, fields, plan))
        else:
            out.append(_render(v, bucket, base, fields, plan))
    return "[" + ",".join(out) + "]"


def _view(name: str, v: Any) -> Obj:
    return v.view(name) if v.__class__ is SynthBatch else v


# Fields whose value differs between objects of one fixed-size synthetic batch (hashes: unless empty).
_PER_NAME = frozenset(("id", "selfLink", "mediaLink", "name"))
_PER_CONTENT = frozenset(("crc32c", "md5Hash"))


def _render_synth(name: str, batch: SynthBatch, bucket: str, base: str, fields: Optional[Tuple[str, ...]],
                  plan) -> str:
    """An unmaterialized synthetic object. Objects of a fixed-size batch differ only in a few fields,
    all always present, so the text is a per-batch template: constant runs between those fields."""
    if not isinstance(batch.size, int):
        return _render(_view(name, batch), bucket, base, fields, plan)
    key = (fields, bucket, base)
    tpls = batch.json_tpl
    tpl = tpls.get(key) if tpls is not None else None
    if tpl is None:
        tpl = _template(_view(name, batch), bucket, base, plan, _PER_NAME | _PER_CONTENT if batch.size else _PER_NAME)
        if tpls is None or len(tpls) >= 8:
            tpls = batch.json_tpl = {}
        tpls[key] = tpl
    if tpl.__class__ is str:  # no per-object field selected
        return tpl
    if len(tpl) == 3 and tpl[1] is _name_enc:  # only the name varies: no Obj needed
        return tpl[0] + _s(name) + tpl[2]
    o = _view(name, batch)
    return "".join([t if t.__class__ is str else t(o, bucket, base) for t in tpl])


def _template(proto: Obj, bucket: str, base: str, plan, dynamic) -> Any:
    """Segments for ``plan``: constant text (rendered from ``proto``) and encoders of the dynamic fields."""
    segs: list = []
    run: list = []   # constant text since the last dynamic field
    first = True
    for prefix, enc in plan:
        fname = prefix[1:-2] if prefix else "*extra"
        if fname in dynamic:
            run.append(("" if first else ",") + prefix)
            segs.append("".join(run))
            segs.append(enc)
            run = []
            first = False
            continue
        v = enc(proto, bucket, base)
        if v is not None:
            run.append(("" if first else ",") + prefix + v)
            first = False
    if not segs:
        return "{" + "".join(run) + "}"
    segs[0] = "{" + segs[0]
    segs.append("".join(run) + "}")
    return tuple(segs)


def _render(obj: Obj, bucket: str, base: str, fields: Optional[Tuple[str, ...]], plan) -> str:
    cache = obj._json
    if cache is False:  # a transient view of a synthetic object (Bucket.view): nothing to keep
        return "{" + ",".join([p + v for p, enc in plan if (v := enc(obj, bucket, base)) is not None]) + "}"
    key = (fields, bucket, base)
    if cache is not None:
        text = cache.get(key)
        if text is not None:
            return text
    else:
        cache = obj._json = {}
    text = "{" + ",".join([p + v for p, enc in plan if (v := enc(obj, bucket, base)) is not None]) + "}"
    if len(cache) >= 4:  # a few field sets per object at most (list, get, ...): bound the memory
        cache.clear()
    cache[key] = text
    return text
