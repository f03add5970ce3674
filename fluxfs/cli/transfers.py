"""Running the transfers that ``cp`` planned: ``--jobs`` at a time, stoppable by Ctrl-C within about a second.

Ctrl-C reaches only the main thread; the worker threads' calls belong to one
`fluxfs.gcs.bridge.CancelScope`, so an interrupt (or the first failure) cancels the batches and
parts in flight, their cleanup deletes any temporary object or unfinished upload, and a download
is written under a temporary name and renamed only when complete, so no partial file is left.
"""
from __future__ import annotations

import argparse
import os
import threading
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

from fluxfs.gcs import bridge

from .base import progress_bar, url_of

# Objects up to this size are fetched in compose-backed batches; larger ones are streamed one by one.
SMALL_OBJECT = 8 * 1024 * 1024
BATCH_OBJECTS = 256
BATCH_BYTES = 16 * 1024 * 1024
COPY_CHUNK = 8 * 1024 * 1024


@dataclass
class Transfer:
    """One file to move: `src` and `dst` are local paths or "bucket/key" paths depending on `kind`."""

    kind: str  # "up" (local -> bucket), "down" (bucket -> local), "copy" (bucket -> bucket)
    src: str
    dst: str
    size: int
    info: Optional[Dict[str, Any]] = None


@dataclass
class Outcome:
    """What a run did, counted as each file finishes (so an interrupt can say how far it got)."""

    copied: int = 0
    copied_bytes: int = 0
    skipped: List[str] = field(default_factory=list)  # destinations that existed (cp -n)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def done(self, t: Transfer) -> None:
        with self.lock:
            self.copied += 1
            self.copied_bytes += t.size

    def skip(self, t: Transfer) -> None:
        with self.lock:
            self.skipped.append(t.dst if t.kind == "down" else url_of(t.dst))


def name_max(directory: str) -> int:
    """The longest file name, in bytes, the filesystem holding `directory` (or its nearest existing parent) takes."""
    while directory and not os.path.isdir(directory):
        directory = os.path.dirname(directory.rstrip(os.sep)) if directory.rstrip(os.sep) else ""
    try:
        return int(os.pathconf(directory or ".", "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def temp_name(dst: str) -> str:
    """The name a download is written under before the rename: beside `dst`, the pid and thread making it
    unique, and short enough for the directory (a `dst` near the length limit gets its name cut)."""
    head, base = os.path.split(dst)
    suffix = f".fluxfs-tmp-{os.getpid()}-{threading.get_ident()}"
    room = name_max(head) - len(suffix)
    raw = os.fsencode(base)
    if len(raw) > room:
        base = os.fsdecode(raw[:room])  # a cut inside a character is still a valid local name: bytes
    return os.path.join(head, base + suffix)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a copy; the message says how many files were copied before it."""


class _Stop(Exception):
    """Raised in a worker that sees its scope cancelled between two steps."""


@dataclass
class _Run:
    fs: Any
    scope: bridge.CancelScope
    outcome: Outcome
    bar: Any
    no_clobber: bool

    def check(self) -> None:
        if self.scope.cancelled.is_set():
            raise _Stop()

    def chunks(self, f, counted: bool = True) -> Iterator[bytes]:
        """`f`'s bytes in COPY_CHUNK pieces, stopping at the first cancelled check."""
        while True:
            self.check()
            chunk = f.read(COPY_CHUNK)
            if not chunk:
                return
            if counted:
                self.bar.update(len(chunk))
            yield chunk

    def write_local(self, t: Transfer, chunks: Iterable[bytes]) -> None:
        """Write through a temporary name and rename, so an interrupted download leaves no partial file.

        With ``-n`` the rename is a hard link, which fails if the destination appeared meanwhile.
        """
        dst = t.dst
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        tmp = temp_name(dst)
        try:
            with open(tmp, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)
            self.check()
            if self.no_clobber:
                try:
                    os.link(tmp, dst)
                except FileExistsError:
                    self.outcome.skip(t)
                    return
                except OSError:  # no hard links here (some network or FUSE filesystems): check, then rename
                    if os.path.lexists(dst):
                        self.outcome.skip(t)
                        return
                    os.replace(tmp, dst)
            else:
                os.replace(tmp, dst)
        except OSError as exc:
            if exc.errno is None:
                raise
            # Name the destination the user asked for (not our temporary name): "File too large: dst".
            raise OSError(exc.errno, exc.strerror, dst) from exc
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.outcome.done(t)

    def download_batch(self, batch: List[Transfer]) -> None:
        # One compose-backed batched read; sizes and generations come from the listing already done.
        self.check()
        data = self.fs.cat_objects([t.info for t in batch])
        for t in batch:
            payload = data[t.src]
            if isinstance(payload, BaseException):
                raise payload
            self.write_local(t, [payload])
            self.bar.update(len(payload))

    def download_one(self, t: Transfer) -> None:
        self.check()
        with self.fs.open(t.src, "rb") as f:
            self.write_local(t, self.chunks(f))

    def upload_one(self, t: Transfer) -> None:
        # Every upload goes through fs.open: the atomic multipart writer (an object appears only when
        # complete); "xb" makes the store refuse an object that appeared since the check.
        self.check()
        if self.no_clobber and self.fs.exists(t.dst):
            self.outcome.skip(t)
            self.bar.update(t.size)
            return
        try:
            with open(t.src, "rb") as src, self.fs.open(t.dst, "xb" if self.no_clobber else "wb") as dst:
                for chunk in self.chunks(src):
                    dst.write(chunk)
                self.check()  # cancelled after the last chunk: leaving with _Stop aborts instead of finishing
        except FileExistsError:
            if not self.no_clobber:
                raise
            self.outcome.skip(t)
            return
        self.outcome.done(t)

    def copy_one(self, t: Transfer) -> None:
        self.check()
        if self.no_clobber and self.fs.exists(t.dst):
            self.outcome.skip(t)
        else:
            bridge.run(self.fs, self.fs._cp_file, t.src, t.dst)  # through the bridge: cancellable
            self.outcome.done(t)
        self.bar.update(t.size)

    def in_scope(self, fn: Callable[..., None], *args: Any) -> Callable[[], None]:
        def task() -> None:
            with self.scope.entered():
                fn(*args)
        return task


def run_transfers(fs, transfers: List[Transfer], args: argparse.Namespace) -> Outcome:
    """Run the transfers `args.jobs` at a time and count them.

    The first failure, or Ctrl-C, cancels everything in flight and what has not started; Ctrl-C
    raises `Interrupted` saying how many files were copied, any other failure is raised as is.
    """
    jobs = max(1, int(args.jobs))
    total = sum(t.size for t in transfers)
    outcome = Outcome()
    with progress_bar(args, total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="copying") as bar, \
            ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="fluxfs-cp") as pool:
        run = _Run(fs, bridge.CancelScope(), outcome, bar, bool(getattr(args, "no_clobber", False)))
        futures: List[Future] = []
        try:
            for work in _plan_work(run, transfers):
                futures.append(pool.submit(work))
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            for f in done:
                if f.exception() is not None:
                    raise f.exception()
        except BaseException as exc:
            _stop(run, futures)
            if isinstance(exc, KeyboardInterrupt):
                raise Interrupted(f"copied {outcome.copied} of {len(transfers)} file(s) before Ctrl-C; "
                                  "no partial file was left") from None
            raise
    return outcome


def _plan_work(run: _Run, transfers: List[Transfer]) -> Iterator[Callable[[], None]]:
    """One callable per pool task: small downloads grouped into batched reads, the rest one by one."""
    batch: List[Transfer] = []
    batch_bytes = 0
    for t in transfers:
        if t.kind == "down" and t.size <= SMALL_OBJECT:
            batch.append(t)
            batch_bytes += t.size
            if len(batch) >= BATCH_OBJECTS or batch_bytes >= BATCH_BYTES:
                yield run.in_scope(run.download_batch, batch)
                batch, batch_bytes = [], 0
        elif t.kind == "down":
            yield run.in_scope(run.download_one, t)
        elif t.kind == "up":
            yield run.in_scope(run.upload_one, t)
        else:
            yield run.in_scope(run.copy_one, t)
    if batch:
        yield run.in_scope(run.download_batch, batch)


def _stop(run: _Run, futures: List[Future]) -> None:
    """Cancel what has not started and what is in flight, then wait for the workers' cleanup."""
    run.scope.cancel()
    for f in futures:
        f.cancel()
    pending = [f for f in futures if not f.done()]
    while pending:
        try:
            wait(pending)
        except KeyboardInterrupt:  # a second Ctrl-C: the cleanup is still worth waiting for
            continue
        pending = [f for f in pending if not f.done()]
