"""`cache_limit` as bytes: an int or size text ("200GiB", "1GB"), read by the options' one size parser."""
from __future__ import annotations

from typing import Any, Optional

from ..options import parse_size


def parse_limit(value: Any, name: str = "cache_limit") -> Optional[int]:
    """Bytes the cache directory may hold; None (no limit but the disk's) stays None; negative is refused."""
    if value is None:
        return None
    limit = parse_size(name, value)
    if limit < 0:
        raise ValueError(f"{name} must not be negative, not {value!r}")
    return limit
