"""Command line of the server: ``python -m fluxfs.server`` and ``fluxfs serve``."""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import List, Optional


# `fluxfs serve` listens here unless --port says otherwise, so an exported STORAGE_EMULATOR_HOST
# stays valid across restarts (fake-gcs-server's 4443 is left free for it). `python -m fluxfs.server`
# and `fluxfs.server.run()` keep picking a free port.
SERVE_PORT = 9023


def add_arguments(parser: argparse.ArgumentParser, default_port: int = 0) -> argparse.ArgumentParser:
    """Add the server's flags to ``parser`` (``fluxfs serve`` passes ``default_port=SERVE_PORT``)."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: loopback only)")
    parser.add_argument("--port", type=int, default=default_port,
                        help=f"port (default {default_port}; 0 = pick a free one)" if default_port else
                        "port (0 = pick a free one)")
    parser.add_argument("--root", default=None, help="persist objects under this directory (default: in memory)")
    parser.add_argument("--profile", default="local", choices=["local", "cloud"],
                        help="local: no delays; cloud: 30 ms first byte, 100 MB/s per request")
    parser.add_argument("--latency-ms", type=float, default=None, help="delay before the first byte of each response")
    parser.add_argument("--bandwidth-mbps", type=float, default=None, help="per-request bandwidth cap in MB/s")
    parser.add_argument("--link-mbps", type=float, default=None,
                        help="cap in MB/s on all responses together (a link they share)")
    parser.add_argument("--rate-limit", type=float, default=None, help="requests/s; excess answered 429")
    parser.add_argument("--fail-rate", type=float, default=None, help="fraction of requests failed (0..1)")
    parser.add_argument("--fail-codes", default=None, help="status codes for failures, e.g. 429,503")
    parser.add_argument("--reset-rate", type=float, default=None, help="fraction of responses reset mid-body")
    parser.add_argument("--fail-ops", default=None,
                        help="ops faults apply to: list,read,write,compose,delete,copy,metadata,bucket (default all)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the fault injection")
    parser.add_argument("--read-only-token", default=None, metavar="TOKEN",
                        help="bearer token of a read-only caller (as a role with objectViewer only): requests "
                             "carrying it may read, and every write they try is answered 403")
    parser.add_argument("--allow-host", action="append", default=None, metavar="NAME",
                        help="also answer requests whose Host header is NAME (default: loopback names and the "
                             "listening address only, against DNS rebinding); repeatable")
    # Used by run(in_process=False): exit when the parent dies, so no orphan server outlives a crash.
    parser.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    return parser


def settings_from(args: argparse.Namespace) -> dict:
    s = {"profile": args.profile}
    if getattr(args, "allow_host", None):
        s["allowed_hosts"] = args.allow_host
    for k in ("latency_ms", "bandwidth_mbps", "link_mbps", "rate_limit", "fail_rate", "fail_codes", "reset_rate",
              "fail_ops", "seed", "read_only_token"):
        v = getattr(args, k, None)
        if v is not None:
            s[k] = v
    return s


def serve(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; the URL is the first line printed on stdout."""
    from .app import Server
    from .handle import url_host
    from .listen import Listening

    try:
        srv = Server(args.root, **settings_from(args))
    except ValueError as e:
        print(f"fluxfs serve: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the root cannot be made or read (not a directory, read-only, not permitted)
        print(f"fluxfs serve: cannot use --root {args.root}: {e.strerror or e}"
              f"{f' ({e.filename})' if e.filename and e.filename != args.root else ''}", file=sys.stderr)
        return 2

    async def main():
        try:
            listening = await Listening.start(srv, args.host, args.port)
        except OSError as exc:
            print(f"fluxfs serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc} "
                  "(another server there? pick one with --port N, or --port 0 for a free one)", file=sys.stderr)
            return 1
        port = listening.port
        url = f"http://{url_host(args.host)}:{port}"
        print(url, flush=True)
        if not args.parent_pid:  # a person started it (not run(in_process=False)): say how to use it
            print(banner(url, args.host, args.root), file=sys.stderr, flush=True)
        elif not is_loopback(args.host):
            print(f"fluxfs serve: {exposed_warning(args.host)}", file=sys.stderr, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        watch = asyncio.ensure_future(_watch_parent(args.parent_pid, stop)) if args.parent_pid else None
        await stop.wait()
        if watch is not None:
            watch.cancel()
        await listening.close()
        return 0

    return asyncio.run(main())


def banner(url: str, host: str, root: Optional[str]) -> str:
    """What `fluxfs serve` tells a person on stderr: where the data lives, who may use it, the line to export."""
    data = f"data under --root {root}" if root else "data in memory (lost when it stops; --root DIR keeps it)"
    who = ("for this machine only (loopback): no authentication, not for a network" if is_loopback(host) else
           exposed_warning(host))
    return (f"fluxfs serve: {url}, {data}; {who}; Ctrl-C stops it. In another shell:\n"
            f"export STORAGE_EMULATOR_HOST={url} FSSPEC_FLUX_TOKEN=anon")


def is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def exposed_warning(host: str) -> str:
    every = " (every interface of this machine)" if host in ("0.0.0.0", "::", "") else ""
    return (f"WARNING: listening on {host}{every} with no authentication: anyone who can reach this machine "
            "can read, change and delete every object; it is meant for loopback (127.0.0.1) only")


async def _watch_parent(pid: int, stop: asyncio.Event) -> None:
    while os.getppid() == pid:
        await asyncio.sleep(1.0)
    stop.set()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="fluxfs serve", description="A local GCS-compatible server.")
    add_arguments(parser)
    return serve(parser.parse_args(argv))
