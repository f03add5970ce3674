"""Zonal (Rapid) and HNS bucket creation as gcsfs's ExtendedGcsFileSystem does it; merge refused on zonal buckets;
a bucket made or deleted has its learned layout forgotten (`layout.forget`).

`fs.mkdir(bucket, placement=ZONE, location=REGION)` sends `customPlacementConfig.dataLocations=[ZONE]`,
`storageClass=RAPID`, `hierarchicalNamespace.enabled` and uniform bucket-level access (which HNS requires,
so no ACLs); `enable_hierarchical_namespace=True` makes an HNS bucket. A base class of `FluxFileSystem`.
"""
from __future__ import annotations

from typing import Any

from . import transport
from .layout import forget


class ZonalBuckets:
    """`_mkdir` with gcsfs's `placement`/`enable_hierarchical_namespace`; `_merge` refused on a zonal bucket."""

    async def _mkdir(self, path: str, create_parents: bool = False, enable_hierarchical_namespace: bool = False,
                     placement: str | None = None, location: str | None = None, **kwargs: Any) -> Any:
        """A bucket (zonal with `placement`, HNS with `enable_hierarchical_namespace`); the rest as gcsfs's."""
        if placement is not None or enable_hierarchical_namespace:
            bucket = self.split_path(self._strip_protocol(path))[0]  # type: ignore[attr-defined]
            location = location or self.default_location  # type: ignore[attr-defined]
            if placement is not None:
                location = _zone_region(bucket, placement, location)
                kwargs.update(customPlacementConfig={"dataLocations": [placement]}, storageClass="RAPID")
            kwargs.update(hierarchicalNamespace={"enabled": True},
                          iamConfiguration={"uniformBucketLevelAccess": {"enabled": True}},
                          acl=None, default_acl=None)  # uniform access: no ACLs may be sent
        out = await super()._mkdir(path, create_parents=create_parents,  # type: ignore[misc]
                                   location=location, **kwargs)
        bucket, key, _ = self.split_path(self._strip_protocol(path))  # type: ignore[attr-defined]
        if not key or create_parents:  # a bucket made: whatever was learned of an earlier one of its name is void
            forget(self.client, bucket)  # type: ignore[attr-defined]
        return out

    async def _rmdir(self, path: str) -> Any:
        """gcsfs's; a bucket deleted is forgotten (its layout learned here and shared in the process)."""
        out = await super()._rmdir(path)  # type: ignore[misc]
        bucket, key, _ = self.split_path(self._strip_protocol(path).rstrip("/"))  # type: ignore[attr-defined]
        if not key:
            forget(self.client, bucket)  # type: ignore[attr-defined]
        return out

    async def _merge(self, path: str, paths: list, acl: Any = None) -> Any:
        """gcsfs's merge (a compose); on a zonal bucket, where GCS has no compose, ZonalUnsupported naming it."""
        bucket = self.split_path(path)[0]  # type: ignore[attr-defined]
        (await transport.of(self.client, bucket)).refuse_compose(f"merge into {path}")  # type: ignore[attr-defined]
        return await super()._merge(path, paths, acl=acl)  # type: ignore[misc]


def _zone_region(bucket: str, placement: Any, location: str | None) -> str:
    """The region of zone `placement` ("us-central1-a" -> "us-central1"), which `location` must be if given."""
    if not isinstance(placement, str) or placement.count("-") < 2:
        raise ValueError(f"mkdir {bucket}: placement must be a zone such as 'us-central1-a', not {placement!r}")
    region = placement.rsplit("-", 1)[0]
    if location and location.lower() != region.lower():
        raise ValueError(f"mkdir {bucket}: zone {placement!r} is not in location {location!r} "
                         f"(a zonal bucket's location is its zone's region, {region!r})")
    return location or region
