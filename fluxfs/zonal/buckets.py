"""Zonal (Rapid) and HNS bucket creation as gcsfs's ExtendedGcsFileSystem does it; merge refused on zonal buckets;
a bucket made or deleted has its learned layout forgotten (`layout.forget`).

`fs.mkdir(bucket, placement=ZONE, location=REGION)` sends `customPlacementConfig.dataLocations=[ZONE]`,
`storageClass=RAPID`, `hierarchicalNamespace.enabled` and uniform bucket-level access (which HNS requires,
so no ACLs); `enable_hierarchical_namespace=True` makes an HNS bucket. `Buckets` is composed into
`FluxFileSystem` (`fs._buckets`), whose methods hand it gcsfs's own version (`base`) to run.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable

from . import transport
from .layout import forget

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

Base = Callable[..., Awaitable[Any]]  # gcsfs's version of the method called


class Buckets:
    """`mkdir` with gcsfs's `placement`/`enable_hierarchical_namespace`, `rmdir` of a bucket forgetting its
    layout, `merge` refused on a zonal bucket: on the client alone (never the filesystem)."""

    def __init__(self, client: "Client"):
        self.client = client

    def _split(self, path: str) -> tuple[str, str, Any]:
        return self.client.split_path(self.client.strip_protocol(path).rstrip("/"))

    async def mkdir(self, base: Base, default_location: str | None, path: str, create_parents: bool = False,
                    enable_hierarchical_namespace: bool = False, placement: str | None = None,
                    location: str | None = None, **kwargs: Any) -> Any:
        """A bucket (zonal with `placement`, HNS with `enable_hierarchical_namespace`, in `location`, else
        `default_location`, gcsfs's); the rest as gcsfs's `base`."""
        if placement is not None or enable_hierarchical_namespace:
            bucket = self._split(path)[0]
            location = location or default_location
            if placement is not None:
                location = _zone_region(bucket, placement, location)
                kwargs.update(customPlacementConfig={"dataLocations": [placement]}, storageClass="RAPID")
            kwargs.update(hierarchicalNamespace={"enabled": True},
                          iamConfiguration={"uniformBucketLevelAccess": {"enabled": True}},
                          acl=None, default_acl=None)  # uniform access: no ACLs may be sent
        out = await base(path, create_parents=create_parents, location=location, **kwargs)
        bucket, key, _ = self._split(path)
        if not key or create_parents:  # a bucket made: whatever was learned of an earlier one of its name is void
            forget(self.client, bucket)
        return out

    async def rmdir(self, base: Base, path: str) -> Any:
        """gcsfs's `base`; a bucket deleted is forgotten (its layout learned here and shared in the process)."""
        out = await base(path)
        bucket, key, _ = self._split(path)
        if not key:
            forget(self.client, bucket)
        return out

    async def merge(self, base: Base, path: str, paths: list, acl: Any = None) -> Any:
        """gcsfs's merge (a compose); on a zonal bucket, where GCS has no compose, ZonalUnsupported naming it."""
        bucket = self.client.split_path(path)[0]
        (await transport.of(self.client, bucket)).refuse_compose(f"merge into {path}")
        return await base(path, paths, acl=acl)


def _zone_region(bucket: str, placement: Any, location: str | None) -> str:
    """The region of zone `placement` ("us-central1-a" -> "us-central1"), which `location` must be if given."""
    if not isinstance(placement, str) or placement.count("-") < 2:
        raise ValueError(f"mkdir {bucket}: placement must be a zone such as 'us-central1-a', not {placement!r}")
    region = placement.rsplit("-", 1)[0]
    if location and location.lower() != region.lower():
        raise ValueError(f"mkdir {bucket}: zone {placement!r} is not in location {location!r} "
                         f"(a zonal bucket's location is its zone's region, {region!r})")
    return location or region
