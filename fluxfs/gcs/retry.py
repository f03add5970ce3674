"""One retry policy for every request fluxfs makes: jittered exponential backoff under a deadline.

Policies can differ per operation kind ("list", "read", "compose", "write", "delete"),
set through the ``retry`` storage option.
"""
from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from typing import Any, Awaitable, Callable, Mapping, TypeVar

import aiohttp

from ..errors import ChecksumMismatch, RequestTimeout, RetryableError

from .redact import get_logger

logger = get_logger(__name__)  # records redacted: no credentials in logs
T = TypeVar("T")

OPERATIONS = ("list", "read", "compose", "write", "delete", "metadata")

# Transport failures worth a second try: a reset or truncated body (ClientPayloadError),
# a refused or dropped connection, a timeout.
RETRYABLE_EXCEPTIONS: tuple[type[BaseException], ...] = (
    RetryableError,
    RequestTimeout,
    ChecksumMismatch,
    aiohttp.ClientConnectionError,
    aiohttp.ClientPayloadError,
    asyncio.TimeoutError,
    ConnectionResetError,
)


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Backoff schedule: delay_n = uniform(0, min(maximum, initial * multiplier**n)) ("full jitter")."""

    initial: float = 0.05
    multiplier: float = 2.0
    maximum: float = 4.0
    deadline: float = 120.0
    max_attempts: int = 12

    def __post_init__(self) -> None:
        # Checked (and numbers given as text read) here, not at the first retry, which may be hours later.
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            try:
                if isinstance(value, bool):
                    raise ValueError
                number = int(value) if f.name == "max_attempts" else float(value)
                if f.name == "max_attempts" and number != float(value):
                    raise ValueError
            except (TypeError, ValueError):
                kind = "a whole number" if f.name == "max_attempts" else "a number"
                raise ValueError(f"retry: {f.name} must be {kind}, not {value!r}") from None
            if f.name == "deadline" and number <= 0:
                raise ValueError(f"retry: deadline must be positive, not {value!r}")
            low = {"max_attempts": 1, "multiplier": 1}.get(f.name, 0)
            if number < low:
                raise ValueError(f"retry: {f.name} must be at least {low}, not {value!r}")
            object.__setattr__(self, f.name, number)

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to sleep before attempt number `attempt + 1` (attempt counts from 0)."""
        cap = min(self.maximum, self.initial * self.multiplier**attempt)
        delay = random.uniform(0, cap)
        if retry_after is not None:
            # The server said when to come back: never earlier, and still bounded.
            delay = max(delay, min(retry_after, self.maximum))
        return delay

    async def run(self, fn: Callable[[int], Awaitable[T]], what: str = "request",
                  retry_on: "tuple[type[BaseException], ...] | Callable[[BaseException], bool]" = RETRYABLE_EXCEPTIONS
                  ) -> T:
        """Call `fn(attempt)` (0, 1, ...) until it succeeds, a non-retryable error occurs, or attempts
        or the deadline run out. The attempt number lets a non-idempotent step check, from its second
        attempt on, whether an earlier one landed although its answer was lost (or resume from what did).
        `retry_on`: the failures retried, as types (fewer where a library retries the rest itself, as
        google-cloud-storage's gRPC calls do) or a predicate (gRPC statuses, told apart by their details)."""
        start = time.monotonic()
        attempt = 0
        while True:
            try:
                return await fn(attempt)
            except Exception as exc:
                if not (isinstance(exc, retry_on) if isinstance(retry_on, tuple) else retry_on(exc)):
                    raise
                attempt += 1
                elapsed = time.monotonic() - start
                delay = self.backoff(attempt - 1, getattr(exc, "retry_after", None))
                if attempt >= self.max_attempts or elapsed + delay > self.deadline:
                    logger.warning("giving up on %s after %d attempts: %s", what, attempt, exc)
                    raise
                logger.debug("retrying %s in %.2fs (attempt %d): %s", what, delay, attempt, exc)
                await asyncio.sleep(delay)


DEFAULT_POLICY = RetryPolicy()


def _coerce(value: Any) -> RetryPolicy:
    if isinstance(value, RetryPolicy):
        return value
    if isinstance(value, Mapping):
        return RetryPolicy(**value)
    raise TypeError(f"retry policy must be a RetryPolicy or a dict of its fields, not {type(value).__name__}")


def resolve_policies(retry: Any) -> dict[str, RetryPolicy]:
    """Turn the ``retry`` storage option into a policy per operation kind.

    Accepts None (defaults), a RetryPolicy or dict of its fields (all operations), or a
    dict keyed by operation kind (values: RetryPolicy or dict; key "default" for the rest).
    """
    if retry is None:
        return {op: DEFAULT_POLICY for op in OPERATIONS}
    fields = {f.name for f in dataclasses.fields(RetryPolicy)}
    if isinstance(retry, Mapping) and not set(retry) <= fields:
        unknown = set(retry) - set(OPERATIONS) - {"default"}
        if unknown:
            raise ValueError(
                f"unknown operation kinds in retry option: {sorted(unknown)}; known: {OPERATIONS} "
                f"(or give RetryPolicy fields {sorted(fields)} for all operations)"
            )
        default = _coerce(retry["default"]) if "default" in retry else DEFAULT_POLICY
        return {op: _coerce(retry[op]) if op in retry else default for op in OPERATIONS}
    policy = _coerce(retry)
    return {op: policy for op in OPERATIONS}
