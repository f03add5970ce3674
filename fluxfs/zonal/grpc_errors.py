"""gRPC failures (google-api-core's exceptions) as the exceptions fluxfs raises for the same HTTP answer,
naming the object; and the library's retry settings from the filesystem's retry policy, or none (one attempt)
where `RetryPolicy.run` makes the attempts."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ChecksumMismatch, raise_for_status

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client


def mapped(exc: BaseException, what: str) -> BaseException:
    """The fluxfs exception for a gRPC call's `exc` about `what` ("bucket/key"); `exc` itself when not the server's."""
    from google.api_core import exceptions as gexc
    from google.cloud.storage.exceptions import DataCorruption

    if isinstance(exc, DataCorruption):
        return ChecksumMismatch(f"crc32c mismatch reading {what} over gRPC: bytes corrupted in transit ({exc})")
    if isinstance(exc, gexc.RetryError) and isinstance(exc.cause, BaseException):
        exc = exc.cause  # the library's retry ran out of time: its last failure is what went wrong
    if not isinstance(exc, gexc.GoogleAPICallError):
        return exc
    status = exc.code or 500
    if isinstance(exc, gexc.OutOfRange):
        return ValueError(f"Requested range not satisfiable for {what}: {exc.message}")
    if isinstance(exc, gexc.FailedPrecondition):
        status = 412
    elif isinstance(exc, gexc.ServiceUnavailable):
        status = 503
    try:
        raise_for_status(status if status >= 400 else 500, (exc.message or "").encode(), what)
    except Exception as out:  # the mapped exception is the result
        return out
    return exc


def reraise(exc: BaseException, what: str) -> None:
    """Raise `mapped(exc, what)` from `exc`."""
    out = mapped(exc, what)
    if out is exc:
        raise exc
    raise out from exc


def async_retry(client: "Client", op: str) -> Any:
    """google-api-core's AsyncRetry with the filesystem's backoff, deadline and attempts for `op` ("read",
    "write"); one per call (it counts that call's failures)."""
    from google.api_core.retry_async import AsyncRetry

    policy = client.retry_policy(op)
    failures = 0

    def bounded(exc: Exception) -> None:  # the library's retry knows only a deadline: attempts bounded here
        nonlocal failures
        failures += 1
        if failures >= policy.max_attempts:
            raise exc

    return AsyncRetry(initial=policy.initial, maximum=policy.maximum, multiplier=policy.multiplier,
                      deadline=policy.deadline, on_error=bounded)


def one_attempt() -> Any:
    """google-api-core's AsyncRetry that gives up at the first failure, raising it: for a call whose attempts are
    the filesystem's `RetryPolicy.run`'s. Its predicate retries nothing (the appendable writer's `append` then
    neither retries nor "recovers" its state); `open` swaps in its own predicate, but still calls `on_error`,
    which raises."""
    from google.api_core.retry_async import AsyncRetry

    def give_up(exc: Exception) -> None:
        raise exc

    return AsyncRetry(predicate=lambda exc: False, on_error=give_up)
