"""The commands that move bytes: ``cat`` (objects to stdout) and ``cp`` (local <-> flux://, flux:// -> flux://).

``cp`` plans every transfer and checks it (unsafe names, collisions, ``-n``) before a byte moves,
then runs them ``--jobs`` at a time: small downloads in compose-backed batches, the rest one by one.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Optional

from tqdm import tqdm

from .base import UsageError, human, is_remote, local_path, progress_bar, remote_path, url_of
from .storage import list_objects, make_fs, require_bucket

# Objects up to this size are fetched in compose-backed batches; larger ones are streamed one by one.
SMALL_OBJECT = 8 * 1024 * 1024
BATCH_OBJECTS = 256
BATCH_BYTES = 16 * 1024 * 1024
COPY_CHUNK = 8 * 1024 * 1024


# -- cat ------------------------------------------------------------------------------------

def cmd_cat(args: argparse.Namespace) -> int:
    """``fluxfs cat URL...``: the objects' bytes to stdout, in order; every URL is checked first."""
    fs = make_fs(args)
    paths = [remote_path(u) for u in args.urls]  # validate every URL before printing anything
    out = sys.stdout.buffer
    for url, path in zip(args.urls, paths):
        try:
            f = fs.open(path, "rb")
        except FileNotFoundError:
            require_bucket(fs, path, url)
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
        require_bucket(fs, dpath, dst)
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
                require_bucket(fs, spath, s)
                if info is None and s.endswith("/") and "/" in spath.strip("/"):
                    try:  # "flux://b/images/": a prefix with objects under it?
                        info = fs.info(spath.rstrip("/"))
                    except FileNotFoundError:
                        info = None
                    if info is None or info.get("type") != "directory":
                        raise FileNotFoundError(f"no objects under {s} (to copy a prefix, use cp -r)")
                if info is None:
                    raise FileNotFoundError(f"no such object: {s}")
                raise UsageError(f"{s} is a prefix (a directory): use cp -r")
            require_bucket(fs, spath, s)
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
            require_bucket(fs, dpath, dst)
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
    with progress_bar(args, total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="copying") as bar, \
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
    """``fluxfs cp [-r] [-n] [-j N] SRC... DST``: plan, check, copy; a summary line on stderr."""
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
