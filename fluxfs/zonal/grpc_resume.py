"""Appends to an appendable object that survive a broken `BidiWriteObject` stream, and never write wrong bytes.

google-cloud-storage's own append retry rewinds the bytes of the append call it is in to the object's absolute
persisted size, so a stream broken during any append but the first resends the wrong bytes (or none) and loses
what earlier calls sent unflushed (docs/compat.md, to report upstream). fluxfs sends the data messages itself
(`gcs_adapter.send_data`, each with its crc32c) and flushes with the writer's `flush`: each append ends flushed
(its persisted size confirmed), so only the bytes of the append in progress can be unconfirmed, and the caller
holds them. On a transient failure the object is taken over again (generation and write handle, as
GCS documents for a broken appendable stream), its persisted size read, and the append resent from there; the
attempts and backoff are the filesystem's write retry policy (`RetryPolicy.run`, the one HTTP requests retry
under). Persisted bytes that are not the ones sent (a size outside the append's range, or, where the crc32c of
what the object held is known, another crc32c: another writer appended meanwhile) end the write with
`ResumeImpossible` naming the object: nothing is guessed. A stream's first opening (`open_stream`) is retried
under the same policy.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Optional

from ..errors import AppendTakenOver, RequestTimeout, ResumeImpossible, TakenOverWhileResuming
from ..gcs import checksums
from ..gcs.redact import get_logger
from .gcs_adapter import (close_stream_call, detach_stream, drop_stream, extra, forget_position, redirected,
                          send_data)
from .grpc_client import grpc_client
from .grpc_errors import one_attempt
from .stalls import bounded

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

logger = get_logger(__name__)

CLOSE_WAIT = 5.0  # seconds a broken stream is given to close before it is dropped
SLICE = 2 * 2**20  # bytes per message (the library's largest), each sent within read_timeout
_closing: "set[asyncio.Future]" = set()


def within(client: "Client", aw: Any, what: str, writing: bool = False) -> Any:
    """`aw`, a write-stream call showing no progress until it ends (an opening, 2 MiB handed over, a flush, a
    finalize), bounded by `read_timeout`: RequestTimeout naming `what` (`writing`: the server took nothing)."""
    return bounded(aw, client.options.read_timeout, what, "BidiWriteObject", writing)


def retryable(exc: BaseException) -> bool:
    """Whether a write stream failing with `exc` may be resumed: a transient status, or a redirect."""
    from google.api_core import exceptions as gexc

    if isinstance(exc, (gexc.InternalServerError, gexc.ServiceUnavailable, gexc.DeadlineExceeded,
                        gexc.TooManyRequests, RequestTimeout)):
        return True  # (a stalled stream too: taken over again, as a broken one)
    return redirected(exc)


def taken_over(exc: BaseException) -> bool:
    """Whether a write stream failed because another writer took the object over (ABORTED, not a redirect)."""
    from google.api_core import exceptions as gexc

    return isinstance(exc, gexc.Aborted) and not retryable(exc)


def _taken(what: str, writer: Any, base: int, size: int, exc: Optional[BaseException]) -> AppendTakenOver:
    """The error of an append of `size` bytes at `base` that another writer's takeover cut short: how much persisted
    (the writer's confirmed size), in `persisted` and in words; `at` is that absolute size."""
    done = max(0, min(size, int(writer.persisted_size or 0) - base))
    err = AppendTakenOver(f"append to {what}: another writer took the object over while this append was being "
                          f"written ({exc or 'an earlier append of this write was cut short'}): "
                          + (f"the first {done} bytes of this append persisted, nothing after them"
                             if done else f"none of the {size} bytes of this append persisted"), what, done)
    err.at = base + done
    return err


def track(writer: Any, crc: Optional[int]) -> None:
    """Start following the crc32c of `writer`'s persisted bytes from `crc` (None: not known)."""
    extra(writer).crc = crc


async def persisted_crc(client: "Client", writer: Any) -> Optional[int]:
    """The crc32c GCS gives for the persisted bytes of `writer`'s generation, None when it gives none."""
    obj = await grpc_client(client).get_object(writer.bucket_name, writer.object_name,
                                               generation=int(writer.generation))
    pb = type(obj).pb(obj) if hasattr(type(obj), "pb") else obj
    return pb.checksums.crc32c if pb.checksums.HasField("crc32c") else None


async def append(client: "Client", writer: Any, data: bytes, crc: Optional[int] = None) -> None:
    """Append `data` at the object's end and flush it; a broken stream is resumed from the persisted size, under
    the write retry policy (`RetryPolicy.run`, as every HTTP request). Raises the last failure once the policy runs
    out, `ResumeImpossible` if resuming cannot be exact. `crc`, the crc32c of `data` when the caller has it, is
    combined into the persisted bytes' crc32c instead of hashing `data` again."""
    what = f"{writer.bucket_name}/{writer.object_name}"
    base = int(writer.persisted_size or 0)  # the previous append ended flushed: this is the confirmed size
    end = base + len(data)
    state = extra(writer)
    if state.taken:  # taken over just after the previous append persisted whole
        await release(writer)
        raise _taken(what, writer, base, len(data), None)
    broke: list = []  # what broke the stream last: the next attempt drops that stream, keeping a redirect's token
    confirmed = base  # the most our streams confirmed (a failed takeover forgets the writer's size: kept here)

    async def attempt(n: int) -> None:
        nonlocal confirmed
        try:
            if n:
                if writer.persisted_size is not None:  # the broken stream's last confirmed size
                    confirmed = max(confirmed, int(writer.persisted_size))
                _drop_stream(writer, broke[-1])
                await _reopen(client, writer, what)
                await _check(client, writer, what, data, base, confirmed)
            done = int(writer.persisted_size or 0) - base
            whole = data if isinstance(data, bytes) else bytes(data)  # a protobuf bytes field takes no view
            for at in range(done, len(data), SLICE):  # each slice taken within read_timeout, or the stream stalled
                piece = whole if at == 0 and len(whole) <= SLICE else whole[at:at + SLICE]
                await within(client, send_data(writer, piece, checksums.crc32c(piece)), what, writing=True)
            persisted = await within(client, writer.flush(), what, writing=True)
            if persisted != end:
                raise ResumeImpossible(f"the write of {what} cannot go on: GCS holds {persisted} bytes of it after "
                                       f"appending bytes {base}..{end} (another writer appended to it?)")
            if state.crc is not None:
                state.crc = (checksums.extend(state.crc, data) if crc is None
                             else checksums.crc32c_combine(state.crc, crc, len(data)))
        except Exception as exc:
            if taken_over(exc):  # what our stream confirmed persisted is ours; nothing after it is
                if int(writer.persisted_size or 0) >= end:
                    state.taken = True  # all of it persisted: the next append (or close) is told
                    return
                err = _taken(what, writer, base, len(data), exc)
                await release(writer)
                raise err from exc
            broke.append(exc)
            raise

    await client.retry_policy("write").run(attempt, what=f"the write of {what}", retry_on=retryable)


async def open_stream(client: "Client", writer: Any, what: str) -> None:
    """Open `writer`'s stream (a new object, or a takeover of its generation), each try an attempt of the write
    retry policy: a transient status or a redirect (its routing token kept) is tried again; a stall is not (an
    opening that stalled may have made the object: a create-only write would then refuse its own object)."""
    broke: list = []

    async def attempt(n: int) -> None:
        if n:
            _drop_stream(writer, broke[-1])
        try:
            await within(client, writer.open(retry_policy=one_attempt()), what)
        except Exception as exc:
            broke.append(exc)
            raise

    await client.retry_policy("write").run(attempt, what=f"opening the write of {what}",
                                           retry_on=lambda exc: retryable(exc) and not isinstance(exc, RequestTimeout))


async def _check(client: "Client", writer: Any, what: str, data: bytes, base: int, confirmed: int) -> None:
    """The taken-over object must hold our confirmed bytes and at most the append in progress, and what it
    holds past them must be ours (its crc32c, where known). Fewer bytes: `ResumeImpossible`; another writer's
    bytes past ours: `TakenOverWhileResuming`, counting what of this append our stream had confirmed."""
    persisted, end = int(writer.persisted_size or 0), base + len(data)
    why = ""
    if persisted < base:
        raise ResumeImpossible(f"cannot resume the write of {what} after its stream broke: GCS holds {persisted} "
                               f"bytes of it, the write had {base} confirmed; nothing more was written")
    if persisted > end:
        why = f"GCS holds {persisted} bytes of it, the write had {base} confirmed and was sending up to {end}"
    elif persisted > base and extra(writer).crc is not None:
        expect = checksums.extend(extra(writer).crc, memoryview(data)[:persisted - base].tobytes())
        held = await persisted_crc(client, writer)
        if held is not None and held != expect:
            why = (f"the {persisted - base} bytes GCS holds past the {base} confirmed are not the ones sent "
                   f"(crc32c {held}, sent {expect})")
    if why:
        done = max(0, min(len(data), confirmed - base))
        await release(writer)
        err = TakenOverWhileResuming(f"cannot resume the write of {what} after its stream broke: {why} (another "
                                     f"writer changed it); nothing more was written", what, done)
        err.at = base + done
        raise err


def _drop_stream(writer: Any, exc: BaseException) -> None:
    """Forget the broken stream (closed in the background), keeping a redirect's routing token and handle."""
    stream = drop_stream(writer, exc)
    if stream is not None:
        task = asyncio.ensure_future(_close_quietly(stream))
        _closing.add(task)  # held until done (the loop keeps only weak references to tasks)
        task.add_done_callback(_closing.discard)


async def release(writer: Any) -> None:
    """Close a failed writer's stream call (a stream the library no longer counts as open still has its request
    task pending: left so, asyncio reports "Task was destroyed but it is pending!" at exit)."""
    stream = detach_stream(writer)
    if stream is not None:
        await _close_quietly(stream)


async def _close_quietly(stream: Any) -> None:
    try:
        await asyncio.wait_for(close_stream_call(stream), CLOSE_WAIT)
    except BaseException as exc:  # a broken stream: nothing left to close
        logger.debug("closing a broken write stream: %r", exc)


async def _reopen(client: "Client", writer: Any, what: str) -> None:
    """Take the object over again by generation and write handle; `writer.persisted_size` is then GCS's. One
    attempt: a transient failure is retried by `append`'s policy, as a broken stream is."""
    forget_position(writer)
    try:
        await within(client, writer.open(retry_policy=one_attempt()), what)
    except Exception as exc:
        if retryable(exc):
            raise
        raise ResumeImpossible(f"cannot resume the write of {what} after its stream broke: taking generation "
                               f"{writer.generation} over again failed ({type(exc).__name__}: {exc})") from exc
