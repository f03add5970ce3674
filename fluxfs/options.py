"""`FluxOptions`: every fluxfs option in one frozen dataclass, defaults filled and validated once.

The constructor of `FluxFileSystem` builds it from its keyword arguments, which is also where
`storage_options`, `FSSPEC_FLUX_*` environment variables (through fsspec's config) and the
CLI's `-o key=value` end up; code reads `fs.options.<name>` and never re-derives a default.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import re
from typing import Any, Mapping, Optional

import aiohttp
from gcsfs.core import GCSFileSystem

from .gcs import tempnames
from .gcs.retry import RetryPolicy, resolve_policies

# Batched reads, chosen with bench/reads.py on the cloud profile (30 ms first byte, 100 MB/s per
# request) on a shared 2-core box: 64 groups in flight beat 32 (1,257 vs 766 obj/s at 100 KiB;
# requests are latency bound, so concurrency is throughput) and 96 gained nothing; at 256 KiB
# compose and direct reads tie, at 1 MiB compose loses (98 vs 133 obj/s: the transfer dominates
# and the serial compose -> GET adds a round trip), so objects above 256 KiB are read directly;
# 32 sources of <= 256 KiB make <= 8 MiB composites (~110 ms at 100 MB/s), the cap also
# bounding memory per group.
DEFAULT_MAX_COMPOSITE_SIZE = 8 * 2**20
DEFAULT_COMPOSE_THRESHOLD = 256 * 2**10
DEFAULT_READ_CONCURRENCY = 64

# Writes, measured on the cloud profile with torch.save of a 256 MB state dict (medians of 4-5
# interleaved runs, MB/s): 8 MiB x 8 in flight 217, 8 x 12 254, 8 x 16 246; 16 MiB parts gained
# nothing. On 2 shared cores the save is CPU-bound (per 256 MB: ~0.35 s client, ~0.8 s server,
# which md5s every part for its ETag), yet 16 streams keep the server's paced receive loops
# busier than 8. Memory is about (concurrency + 2) x part size = 144 MiB. 8 MiB is also the
# smallest part that amortises the 30 ms per request (~84 ms on the wire); XML multipart needs
# >= 5 MiB parts. (Dataflux uses 32 MiB x 8 threads, after staging the whole checkpoint in memory.)
DEFAULT_PART_SIZE = 8 * 2**20
DEFAULT_WRITE_CONCURRENCY = 16
# What one write handle may hold: parts in flight plus the part being filled. Parts grow with the write
# (writes/schedule.py) up to half of it, so 2 GiB allows the 1 GiB parts XML multipart needs to reach
# 5 TiB in 10,000 parts; it is reached only past ~800 GiB written (a 10 GiB write peaks near 160 MiB).
DEFAULT_WRITE_MEMORY = 2 * 2**30
# Components a compose write may have: GCS documents no limit today, so this is chosen for memory: 32,768
# (three levels of 32-source composes) holds 5 TiB with parts of at most 256 MiB. A server that keeps a
# lower limit (older deployments: 1,024) is detected during the write (writes/compose_limit.py).
DEFAULT_COMPOSE_MAX_COMPONENTS = 32_768

DEFAULT_LIST_CONCURRENCY = 64
STRATEGIES = ("xml", "compose", "off")


_BOOLS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?)\s*([a-z]*)\s*", re.IGNORECASE)
BOOL_OPTIONS = ("compose", "progress")
COUNT_OPTIONS = ("list_concurrency", "list_page_size", "read_concurrency", "write_concurrency")
SIZE_OPTIONS = ("part_size", "max_composite_size", "compose_threshold")


def parse_size(name: str, value: Any) -> int:
    """Bytes from an int or text such as "8MiB", "8M" (binary), "8MB" (decimal) or "8388608"."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{name} must be a size in bytes (8388608, '8MiB'), not {value!r}")
    if isinstance(value, str):
        m = _SIZE.fullmatch(value)
        unit = _UNITS.get(m.group(2).lower()) if m else None
        if unit is None:
            raise ValueError(f"{name} must be a size in bytes such as 8388608, '8MiB', '8M' or '8MB', not {value!r}")
        value = float(m.group(1)) * unit
    if value != int(value):
        raise ValueError(f"{name} must be a whole number of bytes, not {value!r}")
    return int(value)


def coerce(name: str, value: Any) -> Any:
    """`value` as option `name`'s type; ValueError naming the option when it cannot be one."""
    if name in BOOL_OPTIONS:
        if isinstance(value, bool):
            return value
        if isinstance(value, (str, int)) and str(value).strip().lower() in _BOOLS:
            return _BOOLS[str(value).strip().lower()]
        raise ValueError(f"{name} must be True or False, not {value!r}")
    if name in SIZE_OPTIONS:
        return parse_size(name, value)
    if name in COUNT_OPTIONS:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        raise ValueError(f"{name} must be a whole number, not {value!r}")
    if name == "read_timeout":
        try:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"read_timeout must be a number of seconds, not {value!r}") from None
    return value


@dataclasses.dataclass(frozen=True)
class FluxOptions:
    """fluxfs's own options (gcsfs's, such as `token` or `project`, stay gcsfs's)."""

    list_concurrency: int = DEFAULT_LIST_CONCURRENCY   # objects.list calls of the parallel lister
    list_page_size: int = 1000                          # items per page (GCS's cap)
    compose: bool = True                                # batched reads through temporary composites
    max_composite_size: int = DEFAULT_MAX_COMPOSITE_SIZE
    compose_threshold: int = DEFAULT_COMPOSE_THRESHOLD  # larger objects are read directly
    read_concurrency: int = DEFAULT_READ_CONCURRENCY    # requests a batched read keeps in flight
    multipart: str = "xml"                              # upload strategy: "xml", "compose" or "off"
    part_size: int = DEFAULT_PART_SIZE
    write_concurrency: int = DEFAULT_WRITE_CONCURRENCY
    write_memory: int = DEFAULT_WRITE_MEMORY            # bytes one write holds at most (parts grow up to half)
    compose_max_components: int = DEFAULT_COMPOSE_MAX_COMPONENTS  # parts of one compose write
    retry: Mapping[str, RetryPolicy] = dataclasses.field(default_factory=lambda: resolve_policies(None))
    read_timeout: float = 60.0                          # seconds without progress before a request fails
    job_id: Optional[str] = None                        # names this job's temporary objects; None: generated
    temp_prefix: str = tempnames.TEMP_PREFIX            # where temporaries live (only fluxfs-named ones are hidden)
    progress: bool = False                              # progress bars for long listings

    @classmethod
    def from_arguments(cls, **given: Any) -> "FluxOptions":
        """Options from constructor arguments; None means "the default". Text from `FSSPEC_FLUX_*` or the
        CLI's `-o` is read as its field's type ("False", "8MiB", "5"), and a wrong type is refused here,
        naming the option, rather than failing somewhere later."""
        values = {k: coerce(k, v) for k, v in given.items() if v is not None}
        if "retry" in values:
            values["retry"] = resolve_policies(values["retry"])
        return cls(**values)

    def __post_init__(self) -> None:
        if self.multipart not in STRATEGIES:
            raise ValueError(f"multipart must be 'xml', 'compose' or 'off', not {self.multipart!r}")
        if not 1 <= self.list_page_size <= 1000:
            raise ValueError(f"list_page_size must be between 1 and 1000 (GCS's cap), not {self.list_page_size}")
        for name in ("list_concurrency", "read_concurrency", "write_concurrency", "part_size", "write_memory",
                     "compose_max_components"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        for name in ("write_memory", "compose_max_components"):  # from env / -o they arrive as strings
            object.__setattr__(self, name, int(getattr(self, name)))
        if self.write_memory < 2 * int(self.part_size):
            raise ValueError(f"write_memory {self.write_memory} must hold two parts of part_size {self.part_size} "
                             "(one uploading, one being filled); raise write_memory or lower part_size")
        if self.max_composite_size < 0 or self.compose_threshold < 0:
            raise ValueError("max_composite_size and compose_threshold must not be negative")
        tempnames.check_prefix(self.temp_prefix)
        if self.job_id is not None:
            tempnames.check_job_id(self.job_id)
        if not self.read_timeout > 0:
            raise ValueError(f"read_timeout must be positive, not {self.read_timeout}")

    @functools.cached_property
    def http_timeout(self) -> aiohttp.ClientTimeout:
        """No total limit (multi-GB bodies take long), but a stalled socket fails after `read_timeout`."""
        return aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=self.read_timeout)

    @functools.cached_property
    def body_timeout(self) -> aiohttp.ClientTimeout:
        """For requests with a body: no socket read limit, which would start while the body is still
        queued in socket buffers; `gcs.progress.Watchdog` bounds every stall instead."""
        return aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=None)

    def retry_policy(self, op: str) -> RetryPolicy:
        """The retry policy for an operation kind ("list", "read", "compose", "write", "delete", "metadata")."""
        return self.retry.get(op) or self.retry["read"]


# Keyword arguments fsspec's base classes take without naming them in a signature: the rest of what
# gcsfs would pass up to them (storage_options=, a misspelled option) would be silently ignored.
_FSSPEC_KWARGS = frozenset({"skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths",
                            "asynchronous", "loop", "batch_size"})


@functools.lru_cache(maxsize=1)
def _known_kwargs() -> frozenset:
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    gcsfs_own = {n for n, p in inspect.signature(GCSFileSystem.__init__).parameters.items() if p.kind in named}
    return frozenset(gcsfs_own | _FSSPEC_KWARGS) - {"self"}


def refuse_unknown_options(kwargs: dict) -> None:
    """TypeError naming every keyword argument that neither fluxfs, gcsfs nor fsspec takes."""
    unknown = sorted(set(kwargs) - _known_kwargs())
    if not unknown:
        return
    hint = ("storage_options is what fsspec.open and the datasets take; FluxFileSystem takes the options "
            "themselves: FluxFileSystem(**storage_options)" if "storage_options" in unknown
            else "not an option of fluxfs, gcsfs or fsspec (fluxfs's: see fluxfs.options.FluxOptions)")
    raise TypeError(f"FluxFileSystem got unexpected keyword argument(s) {', '.join(map(repr, unknown))}: {hint}")
