"""The `fluxfs` subcommands: ls, du, manifest, cat, cp, cleanup, bench, demo, serve.

Each ``cmd_*`` takes the parsed arguments and returns an exit code; failures are raised as
exceptions and turned into messages by `fluxfs.cli.main`. Progress bars go to stderr, appear
only for work that lasts over a second, and are off with ``--quiet``.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional

from tqdm import tqdm

from .cli import UsageError

REMOTE_SCHEMES = ("flux", "gs", "gcs")
# GCS bucket names: 3-63 characters (up to 222 with dots), lowercase letters, digits, '-', '_' and '.'.
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
# Objects up to this size are fetched in compose-backed batches; larger ones are streamed one by one.
SMALL_OBJECT = 8 * 1024 * 1024
BATCH_OBJECTS = 256
BATCH_BYTES = 16 * 1024 * 1024
COPY_CHUNK = 8 * 1024 * 1024


# -- URLs and the filesystem ----------------------------------------------------------------

def is_remote(url: str) -> bool:
    """True for flux:// (gs://, gcs://) URLs, False for local paths; other schemes are a usage error."""
    if "://" not in url:
        return False
    scheme = url.split("://", 1)[0].lower()
    if scheme in REMOTE_SCHEMES:
        return True
    if scheme == "file":
        return False
    raise UsageError(f"unsupported URL scheme {scheme!r} in {url!r}: use flux://BUCKET/PATH (or a local path)")


def remote_path(url: str, allow_no_bucket: bool = False) -> str:
    """``flux://bucket/key`` -> ``"bucket/key"``, checking the URL names a valid bucket."""
    if not is_remote(url):
        raise UsageError(f"not a bucket URL: {url!r} (expected flux://BUCKET/PATH)")
    rest = url.split("://", 1)[1]
    bucket = rest.split("/", 1)[0]
    if not bucket:
        if allow_no_bucket and not rest.strip("/"):
            return ""
        raise UsageError(f"no bucket in {url!r} (expected flux://BUCKET/PATH)")
    if not _BUCKET_RE.match(bucket):
        raise UsageError(f"invalid bucket name {bucket!r} in {url!r}: 3-63 lowercase letters, digits, '-', '_', '.'")
    return rest


def local_path(url: str) -> str:
    return url[len("file://"):] if url.startswith("file://") else url


def url_of(path: str, like: str = "flux://") -> str:
    """A filesystem path back as a URL, in the scheme the user typed."""
    scheme = like.split("://", 1)[0] if "://" in like else "flux"
    return f"{scheme}://{path}"


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


def _known_options() -> set:
    """Keyword arguments FluxFileSystem accepts (its own, gcsfs's, fsspec's), to catch typos in -o."""
    from gcsfs.core import GCSFileSystem

    from .core import FluxFileSystem

    names = {"skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths",
             "batch_size", "asynchronous", "loop"}
    for cls in (FluxFileSystem, GCSFileSystem):
        names.update(p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "args", "kwargs"))
    return names


def make_fs(args: argparse.Namespace):
    """The FluxFileSystem the command's options describe.

    Against an emulator (``--endpoint`` or STORAGE_EMULATOR_HOST) the default token is "anon",
    as Google's own clients do; against real GCS credentials are found exactly as gcsfs finds
    them (``-o token=...``, GOOGLE_APPLICATION_CREDENTIALS, application-default credentials).
    """
    import fsspec.config

    from .core import FluxFileSystem

    opts = parse_options(getattr(args, "options", []))
    unknown = set(opts) - _known_options()
    if unknown:
        raise UsageError(f"unknown storage option(s) {', '.join(sorted(unknown))}")
    if getattr(args, "endpoint", None):
        opts["endpoint_url"] = args.endpoint
    configured = fsspec.config.conf.get("flux", {})
    endpoint = opts.get("endpoint_url") or configured.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST")
    if opts.get("endpoint_url") and not re.match(r"^https?://", str(opts["endpoint_url"])):
        raise UsageError(f"bad endpoint {opts['endpoint_url']!r}: expected http://HOST:PORT or https://...")
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

    from .gcs.urls import split_endpoint

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


def _bar(args: argparse.Namespace, **kw) -> tqdm:
    """A progress bar on stderr that shows only if the work lasts over a second."""
    return tqdm(file=sys.stderr, delay=1.0, disable=bool(getattr(args, "quiet", False)), dynamic_ncols=True, **kw)


def iter_info_batches(fs, path: str) -> Iterator[List[Dict[str, Any]]]:
    """Batches of object info dicts for every object under `path`, as the parallel lister yields them."""
    for batch in fs.iter_objects(path):
        yield list(batch)


def list_objects(fs, path: str, args: argparse.Namespace, desc: str = "listing") -> List[Dict[str, Any]]:
    """Every object under `path`, with a counting progress bar."""
    out: List[Dict[str, Any]] = []
    with _bar(args, desc=desc, unit=" objects", unit_scale=True) as bar:
        for batch in iter_info_batches(fs, path):
            out.extend(batch)
            bar.update(len(batch))
    return out


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def _require_bucket(fs, path: str, url: str) -> None:
    """FileNotFoundError naming the bucket when it does not exist (listings of a missing bucket look empty)."""
    bucket = path.split("/", 1)[0]
    try:
        fs.info(bucket)
    except FileNotFoundError:
        raise FileNotFoundError(f"bucket {bucket!r} does not exist ({url})") from None


# -- ls, du, manifest, cat ------------------------------------------------------------------

def cmd_ls(args: argparse.Namespace) -> int:
    fs = make_fs(args)
    path = remote_path(args.url, allow_no_bucket=True)
    out = sys.stdout
    if not path:  # flux:// -> the buckets
        for b in sorted(fs.ls("", detail=False)):
            print(url_of(b.strip("/") + "/", args.url), file=out)
        return 0
    if args.recursive:
        _require_bucket(fs, path, args.url)
        n = 0
        if args.unsorted:
            for batch in iter_info_batches(fs, path):
                for info in batch:
                    _print_entry(info, args, out)
                n += len(batch)
        else:
            infos = sorted(list_objects(fs, path, args), key=lambda i: i["name"])
            n = len(infos)
            for info in infos:
                _print_entry(info, args, out)
        if n == 0 and "/" in path.strip("/"):  # nothing below it: a single object, or nothing at all
            try:
                info = fs.info(path)
            except FileNotFoundError:
                info = None
            if info is None or info.get("type") != "file":
                raise FileNotFoundError(f"no such object or prefix: {args.url}")
            _print_entry(info, args, out)
        return 0
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        entries = []
    if not entries:
        _require_bucket(fs, path, args.url)
        if "/" in path.strip("/"):  # an empty bucket lists as nothing; a missing prefix is an error
            raise FileNotFoundError(f"no such object or prefix: {args.url}")
    for info in sorted(entries, key=lambda i: i["name"]):
        _print_entry(info, args, out)
    return 0


def _print_entry(info: Dict[str, Any], args: argparse.Namespace, out) -> None:
    is_dir = info.get("type") == "directory"
    url = url_of(info["name"].rstrip("/") + ("/" if is_dir else ""), args.url)
    if not args.long:
        print(url, file=out)
    elif is_dir:
        print(f"{'DIR':>12}  {'':<24}  {url}", file=out)
    else:
        updated = str(info.get("updated") or info.get("mtime") or "")[:24]
        print(f"{int(info.get('size') or 0):>12}  {updated:<24}  {url}", file=out)


def cmd_du(args: argparse.Namespace) -> int:
    fs = make_fs(args)
    path = remote_path(args.url)
    _require_bucket(fs, path, args.url)
    base = path.rstrip("/")
    per_child: Dict[str, List[int]] = {}
    total = count = 0
    for info in list_objects(fs, path, args, desc="sizing"):
        size = int(info.get("size") or 0)
        total += size
        count += 1
        rel = info["name"][len(base) + 1:] if info["name"].startswith(base + "/") else ""
        child = rel.split("/", 1)[0] + ("/" if "/" in rel else "") if rel else info["name"].rsplit("/", 1)[-1]
        acc = per_child.setdefault(child, [0, 0])
        acc[0] += size
        acc[1] += 1
    if count == 0 and "/" in path.strip("/"):
        raise FileNotFoundError(f"no objects under {args.url}")
    fmt = human if args.human else str
    if not args.summarize:
        for child in sorted(per_child):
            size, n = per_child[child]
            print(f"{fmt(size)}\t{n}\t{url_of(base + '/' + child, args.url)}")
    print(f"{fmt(total)}\t{count}\t{args.url} (total)")
    return 0


def cmd_manifest(args: argparse.Namespace) -> int:
    fs = make_fs(args)
    path = remote_path(args.url)
    _require_bucket(fs, path, args.url)
    with _bar(args, desc="listing", unit=" objects", unit_scale=True) as bar:
        if args.output in ("-", ""):
            n = fs.write_manifest(path, sys.stdout, progress=bar)
        elif is_remote(args.output):
            with fs.open(remote_path(args.output), "wb") as f:
                n = fs.write_manifest(path, f, progress=bar)
        else:  # written to a temporary file and renamed: a failed listing leaves no truncated manifest
            n = fs.write_manifest(path, local_path(args.output), progress=bar)
    if not args.quiet and args.output not in ("-", ""):
        print(f"wrote {n} entries to {args.output}", file=sys.stderr)
    return 0


def cmd_cat(args: argparse.Namespace) -> int:
    fs = make_fs(args)
    paths = [remote_path(u) for u in args.urls]  # validate every URL before printing anything
    out = sys.stdout.buffer
    for url, path in zip(args.urls, paths):
        try:
            f = fs.open(path, "rb")
        except FileNotFoundError:
            _require_bucket(fs, path, url)
            raise FileNotFoundError(f"no such object: {url}") from None
        with f:
            shutil.copyfileobj(f, out, COPY_CHUNK)
    out.flush()
    return 0


# -- cp -------------------------------------------------------------------------------------

@dataclass
class Transfer:
    """One file to move: `src` and `dst` are local paths or "bucket/key" paths depending on `kind`."""

    kind: str  # "up" (local -> bucket), "down" (bucket -> local), "copy" (bucket -> bucket)
    src: str
    dst: str
    size: int
    info: Optional[Dict[str, Any]] = None


def safe_local_target(root: str, rel: str, url: str) -> str:
    """`root/rel` for an object's relative name, refusing names that would land outside `root`.

    Object names are arbitrary strings: ``../../x`` or a symlink inside the destination must
    never make a download write anywhere but under the destination directory.
    """
    parts = rel.split("/")
    if "\x00" in rel or any(p in (".", "..") for p in parts):
        raise UsageError(f"refusing to copy {url}: its name contains '.' or '..' path components "
                         f"and could write outside {root!r}; nothing was copied")
    target = os.path.join(root, *[p for p in parts if p])
    real_root = os.path.realpath(root)
    real_target = os.path.realpath(target)
    if real_target == real_root or os.path.commonpath([real_root, real_target]) != real_root:
        raise UsageError(f"refusing to copy {url}: it would be written to {real_target!r}, outside {root!r}; "
                         "nothing was copied")
    return target


def _check_no_collisions(transfers: List[Transfer]) -> None:
    seen: Dict[str, str] = {}
    for t in transfers:
        key = os.path.normcase(os.path.abspath(t.dst)) if t.kind == "down" else t.dst
        if key in seen:
            raise UsageError(f"{seen[key]} and {t.src} would both be written to {t.dst}; nothing was copied")
        seen[key] = t.src
    if transfers and transfers[0].kind == "down":
        for t in transfers:
            parent = os.path.dirname(os.path.normcase(os.path.abspath(t.dst)))
            while parent and parent != os.path.dirname(parent):
                if parent in seen:
                    raise UsageError(f"{seen[parent]} and {t.src} need {parent} to be both a file and a "
                                     "directory; nothing was copied")
                parent = os.path.dirname(parent)


def _remote_join(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}" if base.rstrip("/") else name


def plan_cp(fs, args: argparse.Namespace) -> List[Transfer]:
    """Every (source, destination) pair, validated before a single byte moves."""
    if len(args.paths) < 2:
        raise UsageError("cp needs a source and a destination: fluxfs cp SRC... DST")
    *srcs, dst = args.paths
    src_remote = [is_remote(s) for s in srcs]
    dst_remote = is_remote(dst)
    if any(src_remote) and not all(src_remote):
        raise UsageError("sources must be all local paths or all flux:// URLs")
    if not src_remote[0] and not dst_remote:
        raise UsageError("one side of cp must be a flux:// URL (use cp(1) for local copies)")
    many = len(srcs) > 1
    transfers: List[Transfer] = []

    if not src_remote[0]:  # upload
        dpath = remote_path(dst)
        dst_dir = many or dst.endswith("/") or "/" not in dpath.rstrip("/")
        for s in map(local_path, srcs):
            if os.path.isdir(s):
                if not args.recursive:
                    raise UsageError(f"{s} is a directory: use cp -r")
                base = _remote_join(dpath, os.path.basename(os.path.normpath(s))) if dst_dir else dpath
                for root, dirs, files in os.walk(s):
                    dirs.sort()
                    for name in sorted(files):
                        full = os.path.join(root, name)
                        rel = os.path.relpath(full, s).replace(os.sep, "/")
                        transfers.append(Transfer("up", full, _remote_join(base, rel), os.path.getsize(full)))
            elif os.path.isfile(s):
                target = _remote_join(dpath, os.path.basename(s)) if dst_dir else dpath
                transfers.append(Transfer("up", s, target, os.path.getsize(s)))
            else:
                raise FileNotFoundError(f"no such local file or directory: {s}")
        _require_bucket(fs, dpath, dst)
    else:  # download or bucket-to-bucket copy
        kind = "copy" if dst_remote else "down"
        if kind == "down":
            dst = local_path(dst)
            dst_dir = many or os.path.isdir(dst) or dst.endswith(os.sep) or dst.endswith("/")
        else:
            dpath = remote_path(dst)
            dst_dir = many or dst.endswith("/") or "/" not in dpath.rstrip("/")
        join = (lambda base, rel, url: safe_local_target(base, rel, url)) if kind == "down" else \
            (lambda base, rel, url: _remote_join(base, rel))
        dst_base = dst if kind == "down" else dpath
        for s in srcs:
            spath = remote_path(s)
            try:
                info = None if s.endswith("/") else fs.info(spath)
            except FileNotFoundError:
                info = None
            if info is not None and info.get("type") == "file":
                name = spath.rsplit("/", 1)[-1]
                if dst_dir:
                    target = join(dst_base, name, s)
                else:
                    target = dst_base
                transfers.append(Transfer(kind, spath, target, int(info.get("size") or 0), info))
                continue
            if not args.recursive:
                _require_bucket(fs, spath, s)
                if info is None:
                    raise FileNotFoundError(f"no such object: {s}")
                raise UsageError(f"{s} is a prefix (a directory): use cp -r")
            _require_bucket(fs, spath, s)
            prefix = spath.rstrip("/")
            objects = [i for i in list_objects(fs, spath, args) if i["name"].startswith(prefix + "/")]
            if not objects:
                raise FileNotFoundError(f"no objects under {s}")
            leaf = prefix.rsplit("/", 1)[-1] if "/" in prefix else prefix
            root = (join(dst_base, leaf, s) if dst_dir else dst_base)
            for i in sorted(objects, key=lambda i: i["name"]):
                rel = i["name"][len(prefix) + 1:]
                if not rel or rel.endswith("/"):
                    continue  # a "directory marker" object: nothing to write
                url = url_of(i["name"], s)
                transfers.append(Transfer(kind, i["name"], join(root, rel, url), int(i.get("size") or 0), i))
        if kind == "copy":
            _require_bucket(fs, dpath, dst)
    _check_no_collisions(transfers)
    if args.no_clobber and transfers and transfers[0].kind == "down":
        for t in transfers:
            if os.path.exists(t.dst):
                raise FileExistsError(f"{t.dst} exists (cp -n); nothing was copied")
    return transfers


def _write_local(dst: str, chunks: Iterable[bytes]) -> None:
    """Write through a temporary name and rename, so an interrupted download leaves no partial file."""
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    tmp = f"{dst}.fluxfs-tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(tmp, dst)
    except OSError as exc:
        if exc.errno is None:
            raise
        # Name the destination the user asked for (not our temporary name): "File too large: dst".
        raise OSError(exc.errno, exc.strerror, dst) from exc
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _read_chunks(f, bar: tqdm) -> Iterator[bytes]:
    while True:
        chunk = f.read(COPY_CHUNK)
        if not chunk:
            return
        bar.update(len(chunk))
        yield chunk


def _download_batch(fs, batch: List[Transfer], bar: tqdm) -> None:
    # One compose-backed batched read; sizes and generations come from the listing already done.
    data = fs.cat_objects([t.info for t in batch])
    for t in batch:
        payload = data[t.src]
        if isinstance(payload, BaseException):
            raise payload
        _write_local(t.dst, [payload])
        bar.update(len(payload))


def _download_one(fs, t: Transfer, bar: tqdm) -> None:
    with fs.open(t.src, "rb") as f:
        _write_local(t.dst, _read_chunks(f, bar))


def _upload_one(fs, t: Transfer, bar: tqdm, no_clobber: bool) -> None:
    # Every upload goes through fs.open: the atomic multipart writer (an object appears only when complete).
    with open(t.src, "rb") as src, fs.open(t.dst, "xb" if no_clobber else "wb") as dst:
        for chunk in _read_chunks(src, bar):
            dst.write(chunk)


def _copy_one(fs, t: Transfer, bar: tqdm) -> None:
    fs.cp_file(t.src, t.dst)
    bar.update(t.size)


def run_transfers(fs, transfers: List[Transfer], args: argparse.Namespace) -> None:
    """Run the transfers `args.jobs` at a time; the first failure cancels what has not started and is raised."""
    jobs = max(1, int(args.jobs))
    total = sum(t.size for t in transfers)
    with _bar(args, total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="copying") as bar, \
            ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="fluxfs-cp") as pool:
        futures: List[Future] = []
        batch: List[Transfer] = []
        batch_bytes = 0

        def flush() -> None:
            nonlocal batch, batch_bytes
            if batch:
                futures.append(pool.submit(_download_batch, fs, batch, bar))
            batch, batch_bytes = [], 0

        for t in transfers:
            if t.kind == "down" and t.size <= SMALL_OBJECT:
                batch.append(t)
                batch_bytes += t.size
                if len(batch) >= BATCH_OBJECTS or batch_bytes >= BATCH_BYTES:
                    flush()
            elif t.kind == "down":
                futures.append(pool.submit(_download_one, fs, t, bar))
            elif t.kind == "up":
                futures.append(pool.submit(_upload_one, fs, t, bar, args.no_clobber))
            else:
                futures.append(pool.submit(_copy_one, fs, t, bar))
        flush()
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for f in done:
                if f.exception() is not None:
                    raise f.exception()
        except BaseException:
            for f in futures:
                f.cancel()
            raise


def cmd_cp(args: argparse.Namespace) -> int:
    fs = make_fs(args)
    t0 = time.perf_counter()
    transfers = plan_cp(fs, args)
    run_transfers(fs, transfers, args)
    if not args.quiet:
        dt = time.perf_counter() - t0
        nbytes = sum(t.size for t in transfers)
        print(f"copied {len(transfers)} file(s), {human(nbytes)} in {dt:.1f} s "
              f"({human(nbytes / dt if dt else 0)}/s)", file=sys.stderr)
    return 0


def cmd_mb(args: argparse.Namespace) -> int:
    fs = make_fs(args)
    path = remote_path(args.url)
    bucket = path.strip("/")
    if "/" in bucket:
        raise UsageError(f"mb takes a bucket URL such as flux://my-bucket, not {args.url!r}")
    if fs.exists(bucket):
        raise FileExistsError(f"bucket {bucket!r} exists")
    fs.mkdir(bucket, create_parents=True)
    return 0


# -- cleanup, bench, demo, serve ------------------------------------------------------------

def cmd_cleanup(args: argparse.Namespace) -> int:
    from .temporaries import cleanup, parse_age

    try:
        age = parse_age(args.older_than)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    fs = make_fs(args)
    path = remote_path(args.url)
    _require_bucket(fs, path, args.url)
    removed = cleanup(fs, args.url, older_than=age)
    n = len(removed) if isinstance(removed, (list, tuple, set)) else removed
    # Unfinished XML multipart uploads (a killed writer's) hold parts that no listing shows.
    from .gcs.bridge import run as run_sync
    from .temporaries import abort_incomplete_uploads

    bucket, _, prefix = path.partition("/")
    aborted = run_sync(fs, abort_incomplete_uploads, fs, bucket, prefix, age or 0.0)
    if not args.quiet:
        print(f"removed {n} temporary object(s) and aborted {len(aborted)} unfinished upload(s) "
              f"from {args.url}", file=sys.stderr)
    return 0


def repo_root() -> Optional[Path]:
    """The source checkout holding bench/, if fluxfs runs from one."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "bench" / "__main__.py").exists() else None


def cmd_bench(args: argparse.Namespace) -> int:
    root = repo_root()
    if root is None:
        raise UsageError("the benchmarks ship with the source checkout (bench/), not the installed package: "
                         "run `make bench` or `python -m bench` from a clone")
    return subprocess.call([sys.executable, "-m", "bench", *args.bench_args], cwd=str(root))


def cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    return demo.run(args)


def cmd_serve(args: argparse.Namespace) -> int:
    if getattr(args, "server_import_error", None):
        raise RuntimeError(f"the embedded server could not be imported: {args.server_import_error}")
    from .server import cli as server_cli

    return server_cli.serve(args)
