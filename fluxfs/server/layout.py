"""A bucket's layout settings as GCS takes them at creation: location, storage class, custom placement (a
zone makes a zonal, Rapid, bucket), hierarchical namespace and uniform bucket-level access; checked as GCS
requires (RAPID needs one zone, HNS and uniform access; HNS needs uniform access) and shown in the bucket
resource and in `GET /storage/v1/b/B/storageLayout`."""
from __future__ import annotations

from typing import Any, Dict

from .errors import ServerError

# Fields of a buckets.insert body kept as layout settings (the rest of a bucket: buckets.py).
LAYOUT_FIELDS = ("location", "storageClass", "customPlacementConfig", "hierarchicalNamespace", "iamConfiguration")
_MULTI_REGIONS = {"US", "EU", "ASIA"}
ZONAL_COMPOSE_MESSAGE = "Compose is not supported for objects in zonal buckets (storage class RAPID)."
# Rewrite (and copy, its one-call form) reads and writes a whole object server-side, which zonal buckets
# do not do either way: GCS refuses it when the source or the destination bucket is zonal.
ZONAL_COPY_MESSAGE = ("{op} is not supported for objects in zonal buckets (storage class RAPID): bucket {bucket} "
                      "is zonal; read the object and write it instead.")


def layout_settings(body: Dict[str, Any]) -> Dict[str, Any]:
    """The layout settings of a buckets.insert body, checked; 400 naming what is wrong."""
    s = {k: body[k] for k in LAYOUT_FIELDS if body.get(k) is not None}
    for k in ("customPlacementConfig", "hierarchicalNamespace", "iamConfiguration"):
        if k in s and not isinstance(s[k], dict):
            raise ServerError(400, f"{k} must be an object.", "invalid")
    for k in ("location", "storageClass"):
        if k in s and not isinstance(s[k], str):
            raise ServerError(400, f"{k} must be a string.", "invalid")
    if "storageClass" in s:
        s["storageClass"] = s["storageClass"].upper()
    locations = (s.get("customPlacementConfig") or {}).get("dataLocations")
    if locations is not None and (not isinstance(locations, list) or not all(isinstance(x, str) for x in locations)):
        raise ServerError(400, "customPlacementConfig.dataLocations must be a list of locations.", "invalid")
    hns = _enabled(s, "hierarchicalNamespace")
    ubla = _enabled(s.get("iamConfiguration") or {}, "uniformBucketLevelAccess")
    if s.get("storageClass") == "RAPID":
        if not locations or len(locations) != 1:
            raise ServerError(400, "The RAPID storage class needs a zonal bucket: customPlacementConfig."
                                   "dataLocations naming one zone.", "invalid")
        if not hns:
            raise ServerError(400, "A zonal bucket (storage class RAPID) needs hierarchicalNamespace.enabled.",
                              "invalid")
    if hns and not ubla:
        raise ServerError(400, "Hierarchical namespace needs iamConfiguration.uniformBucketLevelAccess.enabled.",
                          "invalid")
    return s


def is_zonal(settings: Dict[str, Any]) -> bool:
    """A zonal bucket: storage class RAPID in one zone."""
    return settings.get("storageClass") == "RAPID"


def refuse_zonal_copy(op: str, buckets: Dict[str, bool]) -> None:
    """400 naming the first zonal bucket of a copy's `buckets` ({name: zonal?}, source first); `op`: "Rewrite",
    "Copy"."""
    for name, zonal in buckets.items():
        if zonal:
            raise ServerError(400, ZONAL_COPY_MESSAGE.format(op=op, bucket=name), "invalid")


def resource_fields(settings: Dict[str, Any]) -> Dict[str, Any]:
    """location, locationType, storageClass and the layout objects, as a bucket resource shows them."""
    location = str(settings.get("location") or "US").upper()
    if is_zonal(settings):
        kind = "zone"
    elif location in _MULTI_REGIONS:
        kind = "multi-region"
    elif settings.get("customPlacementConfig"):
        kind = "dual-region"
    else:
        kind = "region"
    out = {"location": location, "locationType": kind, "storageClass": settings.get("storageClass", "STANDARD")}
    out.update({k: settings[k] for k in ("customPlacementConfig", "hierarchicalNamespace", "iamConfiguration")
                if k in settings})
    return out


def storage_layout(name: str, settings: Dict[str, Any]) -> Dict[str, Any]:
    """The storageLayout resource (JSON API `buckets.getStorageLayout`)."""
    f = resource_fields(settings)
    return {"kind": "storage#storageLayout", "bucket": name, "location": f["location"],
            "locationType": f["locationType"],
            "hierarchicalNamespace": {"enabled": _enabled(settings, "hierarchicalNamespace")}}


def _enabled(d: Dict[str, Any], key: str) -> bool:
    v = d.get(key)
    return isinstance(v, dict) and v.get("enabled") is True
