"""The filesystem a command works on: built from ``--endpoint`` and ``-o`` options, plus listing helpers.

Shared by every command that touches a bucket, so options, credentials and "bucket does not
exist" are handled the same way everywhere.
"""
from __future__ import annotations

import argparse
import json
import os
import re
from typing import Any, Dict, Iterable, Iterator, List

from fluxfs.gcs.urls import normalize_endpoint, split_endpoint

from .base import UsageError, progress_bar


def parse_options(items: Iterable[str]) -> Dict[str, Any]:
    """``-o key=value`` pairs; values are read as JSON when they parse (8, false, {"a": 1}), else kept as text."""
    out: Dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise UsageError(f"bad storage option {item!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def _import_filesystem():
    """`FluxFileSystem`, imported without gcsfs's experimental zonal/HNS layer when gcsfs is not loaded yet.

    gcsfs's package ``__init__`` imports `gcsfs.extended_gcsfs` (google-cloud-storage's gRPC
    clients) unless GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false; FluxFileSystem subclasses
    `gcsfs.core.GCSFileSystem` and never uses it, and every `fluxfs cat` (once per shard in
    `pipe:fluxfs cat`) would pay for it. A value the user set is kept; ours is removed again, so
    commands started from here (bench, the demo's server) see the environment unchanged.
    """
    import sys

    ours = "gcsfs" not in sys.modules and "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT" not in os.environ
    if ours:
        os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    try:
        from fluxfs.core import FluxFileSystem
    finally:
        if ours:
            os.environ.pop("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", None)
    return FluxFileSystem


def make_fs(args: argparse.Namespace):
    """The FluxFileSystem the command's options describe.

    Against an emulator (``--endpoint`` or STORAGE_EMULATOR_HOST) the default token is "anon",
    as Google's own clients do; against real GCS credentials are found exactly as gcsfs finds
    them (``-o token=...``, GOOGLE_APPLICATION_CREDENTIALS, application-default credentials).
    """
    FluxFileSystem = _import_filesystem()
    import fsspec.config

    from fluxfs.options import known_keywords, unknown_text

    opts = parse_options(getattr(args, "options", []))
    unknown = sorted(set(opts) - known_keywords())
    if unknown:  # typed by the user: refused, where FluxFileSystem ignores what libraries pass it
        raise UsageError(f"unknown storage option(s) {', '.join(map(unknown_text, unknown))}")
    if getattr(args, "endpoint", None):
        opts["endpoint_url"] = args.endpoint
    if opts.get("endpoint_url"):  # HOST:PORT as in STORAGE_EMULATOR_HOST, or a URL
        opts["endpoint_url"] = normalize_endpoint(str(opts["endpoint_url"]))
    configured = fsspec.config.conf.get("flux", {})
    endpoint = opts.get("endpoint_url") or configured.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST")
    if opts.get("endpoint_url") and not re.match(r"^https?://", str(opts["endpoint_url"])):
        raise UsageError(f"bad endpoint {opts['endpoint_url']!r}: expected HOST:PORT, http://HOST:PORT or https://...")
    if endpoint and "token" not in opts and "token" not in configured:
        opts["token"] = "anon"
    if endpoint:
        check_reachable(str(endpoint))
    try:
        return FluxFileSystem(skip_instance_cache=True, **opts)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"bad storage options: {exc}") from exc


def check_reachable(endpoint: str, timeout: float = 5.0) -> None:
    """Fail at once, with the endpoint named, when nothing listens there.

    Without this a typo in --endpoint costs the whole retry budget (tens of seconds) of
    connection-refused retries. Only explicit endpoints (emulators, proxies) are probed.
    """
    import socket

    parts = split_endpoint(endpoint)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise UsageError(f"bad endpoint {endpoint!r}: {exc}") from None
    if not parts.hostname:
        raise UsageError(f"bad endpoint {endpoint!r}: expected http://HOST:PORT")
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout).close()
    except OSError as exc:
        raise ConnectionError(f"cannot connect to {endpoint}: {exc.strerror or exc}") from None


def iter_info_batches(fs, path: str) -> Iterator[List[Dict[str, Any]]]:
    """Batches of object info dicts for every object under `path`, as the parallel lister yields them."""
    for batch in fs.iter_objects(path):
        yield list(batch)


def list_objects(fs, path: str, args: argparse.Namespace, desc: str = "listing") -> List[Dict[str, Any]]:
    """Every object under `path`, with a counting progress bar."""
    out: List[Dict[str, Any]] = []
    with progress_bar(args, desc=desc, unit=" objects", unit_scale=True) as bar:
        for batch in iter_info_batches(fs, path):
            out.extend(batch)
            bar.update(len(batch))
    return out


def require_bucket(fs, path: str, url: str) -> None:
    """FileNotFoundError naming the bucket when it does not exist (listings of a missing bucket look empty)."""
    bucket = path.split("/", 1)[0]
    try:
        fs.info(bucket)
    except FileNotFoundError:
        raise FileNotFoundError(f"bucket {bucket!r} does not exist ({url})") from None
