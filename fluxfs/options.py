"""`FluxOptions`: every fluxfs option in one frozen dataclass, defaults filled and validated once.

The constructor of `FluxFileSystem` builds it from its keyword arguments, which is also where
`storage_options`, `FSSPEC_FLUX_*` environment variables (through fsspec's config) and the
CLI's `-o key=value` end up; code reads `fs.options.<name>` and never re-derives a default.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import os
import re
import warnings
from typing import Any, Mapping, Optional

import aiohttp
from gcsfs.core import GCSFileSystem

from .errors import UnknownOptionWarning
from .gcs import redact, tempnames
from .gcs.retry import RetryPolicy, resolve_policies

_LOG = redact.get_logger(__name__)

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
# The upload strategies of the `multipart` option; "off", the older name of "resumable", is deprecated.
STRATEGIES = ("xml", "compose", "resumable")
STRATEGY_ALIASES = {"off": "resumable"}


_BOOLS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?)\s*([a-z]*)\s*", re.IGNORECASE)
SIZE_UNITS = ("a whole number (8388608) or one with a unit, binary KiB/MiB/GiB/TiB (also K/M/G/T) or decimal "
              "KB/MB/GB/TB, such as '512MiB' or '1GB'")

# What an option holds, which says how text from `FSSPEC_FLUX_*` or `-o` is read (`coerce`).
BOOL, COUNT, SIZE, SECONDS, STRATEGY, RETRY, TEXT = "bool", "count", "size", "seconds", "strategy", "retry", "text"
LAYOUTS = "layouts"
# What a bucket is (fluxfs/zonal/layout.py): a flat namespace, a hierarchical namespace (HNS), or zonal
# (Rapid: a zone as location, always HNS, no compose). `bucket_types` declares them; "*" names every other bucket.
BUCKET_TYPES = ("standard", "hns", "zonal")
# How a zonal bucket's objects are read and written (fluxfs/zonal/grpc_client.py): gRPC bidi streams, or HTTP.
TRANSPORT, ENDPOINT = "transport", "endpoint"
ZONAL_TRANSPORTS = ("grpc", "http")


def parse_size(name: str, value: Any) -> int:
    """Bytes from an int or text such as "8MiB", "8M" (binary), "8MB" (decimal) or "8388608"."""
    if isinstance(value, str):
        m = _SIZE.fullmatch(value)
        unit = _UNITS.get(m.group(2).lower()) if m else None
        if unit is None:
            raise ValueError(f"{name} must be a size in bytes: {SIZE_UNITS}; not {value!r}")
        value = float(m.group(1)) * unit
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a size in bytes: {SIZE_UNITS}; not {value!r}")
    if value != int(value):
        raise ValueError(f"{name} must be a whole number of bytes, not {value!r}")
    return int(value)


def parse_count(name: str, value: Any) -> int:
    """A whole number from an int, an integral float (8.0) or text ("8"); 1.5, True or "1.5" are refused."""
    if isinstance(value, str) and re.fullmatch(r"\s*[-+]?\d+\s*", value):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"{name} must be a whole number, not {value!r}")


def _parse_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, int)) and str(value).strip().lower() in _BOOLS:
        return _BOOLS[str(value).strip().lower()]
    raise ValueError(f"{name} must be True or False, not {value!r}")


def _parse_seconds(name: str, value: Any) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number of seconds, not {value!r}") from None


def _parse_strategy(name: str, value: Any) -> str:
    text = value.strip().lower() if isinstance(value, str) else value
    if isinstance(text, str) and text in STRATEGY_ALIASES:
        warnings.warn(f"{name}={value!r} is deprecated: spell it {STRATEGY_ALIASES[text]!r} (the same strategy)",
                      DeprecationWarning, stacklevel=2)
        text = STRATEGY_ALIASES[text]
    if text not in STRATEGIES:
        raise ValueError(f"{name} must be 'xml', 'compose' or 'resumable', not {value!r}")
    return text


def _parse_transport(name: str, value: Any) -> str:
    text = value.strip().lower() if isinstance(value, str) else value
    if text not in ZONAL_TRANSPORTS:
        raise ValueError(f"{name} must be 'grpc' or 'http' (how zonal buckets are read and written), not {value!r}")
    return text


def _parse_endpoint(name: str, value: Any) -> str:
    text = value.strip() if isinstance(value, str) else value
    if not isinstance(text, str) or "://" in text or text.count(":") < 1 or not text.rpartition(":")[2].isdigit():
        raise ValueError(f"{name} must be host:port (such as 'storage.googleapis.com:443' or '127.0.0.1:9001'), "
                         f"not {value!r}")
    return text


def _parse_layouts(name: str, value: Any) -> dict[str, str]:
    """{bucket: "standard" | "hns" | "zonal"} from a mapping, "B1=zonal,B2=standard" or one type for every
    bucket ("standard", the same as "*=standard")."""
    if isinstance(value, str):
        text = value.strip()
        pairs = [p.partition("=") for p in text.split(",") if p.strip()] if "=" in text else [("*", "=", text)]
        value = {b.strip(): t.strip() for b, _, t in pairs}
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must map bucket names to one of {', '.join(BUCKET_TYPES)} (such as "
                         f"{{'my-bucket': 'zonal'}}, or 'my-bucket=zonal,*=standard'), not {value!r}")
    out = {}
    for bucket, kind in value.items():
        if not isinstance(bucket, str) or not bucket or "/" in bucket:
            raise ValueError(f"{name}: {bucket!r} is not a bucket name (or '*' for every other bucket)")
        text = kind.strip().lower() if isinstance(kind, str) else kind
        if text not in BUCKET_TYPES:
            raise ValueError(f"{name}: bucket {bucket!r} has type {kind!r}; use one of {', '.join(BUCKET_TYPES)}")
        out[bucket] = text
    return out


_PARSERS = {BOOL: _parse_bool, LAYOUTS: _parse_layouts, COUNT: parse_count, SIZE: parse_size, SECONDS: _parse_seconds,
            STRATEGY: _parse_strategy, TRANSPORT: _parse_transport, ENDPOINT: _parse_endpoint,
            RETRY: lambda _name, value: resolve_policies(value),
            TEXT: lambda _name, value: value}


def option(default: Any, kind: str, doc: str, factory: Any = None) -> Any:
    """A `FluxOptions` field: its default, what it holds (`kind`) and a line saying what it does."""
    meta = {"kind": kind, "doc": doc}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def coerce(name: str, value: Any) -> Any:
    """`value` as option `name`'s type; ValueError naming the option when it cannot be one."""
    return _PARSERS[FIELDS[name].metadata["kind"]](name, value)


@dataclasses.dataclass(frozen=True)
class FluxOptions:
    """fluxfs's own options (gcsfs's, such as `token` or `project`, stay gcsfs's); each is defined here
    only: `FluxFileSystem`'s keyword arguments and its signature are derived from these fields."""

    list_concurrency: int = option(DEFAULT_LIST_CONCURRENCY, COUNT, "objects.list calls of the parallel lister")
    list_page_size: int = option(1000, COUNT, "items per listing page (GCS's cap, 1000)")
    compose: bool = option(True, BOOL, "batched reads of small objects through temporary composites")
    max_composite_size: int = option(DEFAULT_MAX_COMPOSITE_SIZE, SIZE, "size cap of one composite")
    compose_threshold: int = option(DEFAULT_COMPOSE_THRESHOLD, SIZE, "larger objects are read directly")
    read_concurrency: int = option(DEFAULT_READ_CONCURRENCY, COUNT, "requests a batched read keeps in flight")
    multipart: str = option("xml", STRATEGY, "upload strategy: 'xml', 'compose' or 'resumable'")
    part_size: int = option(DEFAULT_PART_SIZE, SIZE, "upload part size")
    write_concurrency: int = option(DEFAULT_WRITE_CONCURRENCY, COUNT, "upload parts in flight")
    write_memory: int = option(DEFAULT_WRITE_MEMORY, SIZE, "bytes one write holds at most (parts grow up to half)")
    compose_max_components: int = option(DEFAULT_COMPOSE_MAX_COMPONENTS, COUNT, "parts of one compose write")
    retry: Mapping[str, RetryPolicy] = option(None, RETRY, "RetryPolicy, its fields, or per operation kind",
                                              factory=lambda: resolve_policies(None))
    read_timeout: float = option(60.0, SECONDS, "seconds without progress before a request fails")
    connect_timeout: float = option(1.5, SECONDS, "seconds connection failures are retried, HTTP and gRPC alike, "
                                    "before ServerUnreachable names the endpoint")
    job_id: Optional[str] = option(None, TEXT, "names this job's temporary objects; None: generated")
    temp_prefix: str = option(tempnames.TEMP_PREFIX, TEXT, "where temporaries live (only fluxfs-named ones hidden)")
    progress: bool = option(False, BOOL, "progress bars for long listings")
    cache_dir: Optional[str] = option(None, TEXT, "node-local cache directory the node's processes share; None: off")
    cache_limit: Optional[int] = option(None, SIZE, "bytes the node-local cache may hold ('200GiB'); None: the disk's")
    cache_shared: bool = option(False, BOOL, "accept a cache_dir other users may write (they are then trusted)")
    bucket_types: Optional[Mapping[str, str]] = option(
        None, LAYOUTS, "{bucket: 'standard'|'hns'|'zonal'} ('*': any other): no layout lookup; None: looked up once")
    zonal_transport: str = option("grpc", TRANSPORT,
                                  "zonal buckets read and written over 'grpc' (bidi streams) or 'http'")
    grpc_endpoint: Optional[str] = option(None, ENDPOINT, "host:port of the gRPC endpoint; None: the HTTP endpoint's")

    @classmethod
    def from_arguments(cls, **given: Any) -> "FluxOptions":
        """Options from constructor arguments; None means "the default". Text from `FSSPEC_FLUX_*` or the
        CLI's `-o` is read as its field's type ("False", "8MiB", "5"), and a wrong type is refused here,
        naming the option, rather than failing somewhere later."""
        return cls(**{k: v for k, v in given.items() if v is not None})

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:  # direct FluxOptions(...) is read as from_arguments is
                object.__setattr__(self, f.name, coerce(f.name, value))
        if not 1 <= self.list_page_size <= 1000:
            raise ValueError(f"list_page_size must be between 1 and 1000 (GCS's cap), not {self.list_page_size}")
        for name in ("list_concurrency", "read_concurrency", "write_concurrency", "part_size", "write_memory",
                     "compose_max_components"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.write_memory < 2 * self.part_size:
            raise ValueError(f"write_memory {self.write_memory} must hold two parts of part_size {self.part_size} "
                             "(one uploading, one being filled); raise write_memory or lower part_size")
        for name in ("max_composite_size", "compose_threshold"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, not {getattr(self, name)}")
        tempnames.check_prefix(self.temp_prefix)
        if self.job_id is not None:
            tempnames.check_job_id(self.job_id)
        _check_cache(self)
        for name in ("read_timeout", "connect_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)}")
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number of seconds, not {getattr(self, name)}")

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


def _check_cache(opts: FluxOptions) -> None:
    """cache_dir as a path text (a PathLike is taken), cache_limit only with it and not negative."""
    if opts.cache_dir is not None:
        if not isinstance(opts.cache_dir, (str, os.PathLike)) or not os.fspath(opts.cache_dir):
            raise ValueError(f"cache_dir must be a directory path, not {opts.cache_dir!r}")
        object.__setattr__(opts, "cache_dir", os.fspath(opts.cache_dir))
    if opts.cache_limit is not None:
        if opts.cache_dir is None:
            raise ValueError(f"cache_limit={opts.cache_limit} needs cache_dir (the node-local cache is off without it)")
        if opts.cache_limit < 0:
            raise ValueError(f"cache_limit must not be negative, not {opts.cache_limit}")


FIELDS: dict[str, dataclasses.Field] = {f.name: f for f in dataclasses.fields(FluxOptions)}
OPTION_NAMES: tuple[str, ...] = tuple(FIELDS)


# Keyword arguments fsspec's base classes take without naming them in a signature.
_FSSPEC_KWARGS = frozenset({"skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths",
                            "asynchronous", "loop", "batch_size"})
_STORAGE_OPTIONS_HINT = ("storage_options is what fsspec.open and the datasets take; FluxFileSystem takes the "
                         "options themselves: FluxFileSystem(**storage_options)")


@functools.lru_cache(maxsize=1)
def known_keywords() -> frozenset:
    """Every keyword argument `FluxFileSystem` uses: fluxfs's options, gcsfs's and fsspec's (the CLI's `-o`,
    the pipes' keyword options and the constructor all check against this one set)."""
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    gcsfs_own = {n for n, p in inspect.signature(GCSFileSystem.__init__).parameters.items() if p.kind in named}
    return frozenset(gcsfs_own | _FSSPEC_KWARGS | set(OPTION_NAMES)) - {"self"}


def closest_option(name: str) -> Optional[str]:
    """The known keyword `name` most likely misspells ("part_sise" -> "part_size"), or None."""
    import difflib

    found = difflib.get_close_matches(name, sorted(known_keywords()), n=1, cutoff=0.75)
    return found[0] if found else None


def unknown_text(name: str) -> str:
    """'name', or 'name' (did you mean 'known'?) when it looks like a misspelled option."""
    near = closest_option(name)
    return f"{name!r} (did you mean {near!r}?)" if near else repr(name)


def refuse_unknown_options(kwargs: Mapping[str, Any], where: str = "FluxFileSystem") -> None:
    """TypeError naming every keyword argument that neither fluxfs, gcsfs nor fsspec takes, and the known
    option each one most likely misspells: for fluxfs's own APIs (the pipes' keyword options, the CLI's `-o`)."""
    unknown = sorted(k for k in set(kwargs) - known_keywords() if not _other_filesystems(k, kwargs[k]))
    if not unknown:
        return
    hint = (_STORAGE_OPTIONS_HINT if "storage_options" in unknown
            else "not an option of fluxfs, gcsfs or fsspec (fluxfs's: see fluxfs.options.FluxOptions)")
    raise TypeError(f"{where} got unexpected keyword argument(s) {', '.join(map(unknown_text, unknown))}: {hint}")


def drop_unknown_options(kwargs: dict) -> None:
    """Remove from `kwargs` what fluxfs, gcsfs and fsspec do not take, as gcsfs ignores it, so libraries that
    pass their own keywords through fsspec (Hugging Face datasets' `hf={...}`) work with fluxfs as with gcsfs.

    A dict under another filesystem's protocol name is fsspec's way to address a filesystem of a chained URL
    and is dropped quietly (a debug log); any other unknown keyword is dropped with one
    `UnknownOptionWarning` naming it and the option it most likely misspells, which
    ``warnings.simplefilter("error", UnknownOptionWarning)`` turns into an error. `storage_options=` stays a
    TypeError: it holds every option (the endpoint, the credentials), and dropping it would send the
    requests to real GCS with default credentials.
    """
    if "storage_options" in kwargs:
        raise TypeError(f"FluxFileSystem got unexpected keyword argument(s) 'storage_options': {_STORAGE_OPTIONS_HINT}")
    for name in sorted(set(kwargs) - known_keywords()):
        value = kwargs.pop(name)
        if _other_filesystems(name, value):
            _LOG.debug("FluxFileSystem ignores %r: the options of another filesystem of a chained URL", name)
            continue
        warnings.warn(f"FluxFileSystem ignores unknown keyword argument {unknown_text(name)}: not an option of "
                      "fluxfs, gcsfs or fsspec (fluxfs's: see fluxfs.options.FluxOptions)",
                      UnknownOptionWarning, stacklevel=4)


def _other_filesystems(name: str, value: Any) -> bool:
    """Whether `name=value` holds the options of a filesystem of a chained URL (fsspec's `protocol={...}`)."""
    import fsspec

    return isinstance(value, Mapping) and name in fsspec.available_protocols()


def constructor_signature(with_self: bool = True) -> inspect.Signature:
    """`FluxFileSystem.__init__`'s signature (the class's without `self`): *args, every option keyword-only
    (None: the default), **kwargs (gcsfs's and fsspec's arguments)."""
    P = inspect.Parameter
    own = [P(f.name, P.KEYWORD_ONLY, default=None, annotation=_annotation(f)) for f in FIELDS.values()]
    first = [P("self", P.POSITIONAL_OR_KEYWORD)] if with_self else []
    return inspect.Signature([*first, P("args", P.VAR_POSITIONAL), *own, P("kwargs", P.VAR_KEYWORD, annotation="Any")])


def _annotation(f: dataclasses.Field) -> str:
    if f.metadata["kind"] == RETRY:
        return "RetryPolicy | Mapping | None"
    text = str(f.type)
    return f"{text[len('Optional['):-1]} | None" if text.startswith("Optional[") else f"{text} | None"


def constructor_doc() -> str:
    """`FluxFileSystem.__init__`'s docstring: each option with its default and what it does."""
    lines = [f"    {f.name}: {f.metadata['doc']} (default: {_default_text(f)})" for f in FIELDS.values()]
    return ("A filesystem for flux:// (and gs://) URLs. fluxfs's options (None means the default; text such as "
            "'8MiB' or 'false' is read as the option's type):\n\n" + "\n".join(lines) +
            "\n\nAny other keyword argument goes to gcsfs (token, project, endpoint_url, ...) and fsspec; "
            "an unknown one is ignored, as gcsfs does, with an UnknownOptionWarning naming it.")


def _default_text(f: dataclasses.Field) -> str:
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return "see fluxfs.RetryPolicy"
    return repr(f.default)
