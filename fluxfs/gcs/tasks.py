"""Running coroutines side by side so that none outlives a failure.

`asyncio.gather` leaves the other awaitables running when one fails; every parallel read here
needs them cancelled (and their cleanup awaited) before the error goes up.
"""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Iterable


async def gather_all(aws: Iterable[Awaitable[Any]]) -> list:
    """Results of `aws`, run concurrently, in order; on the first error or a cancellation the rest
    are cancelled and awaited before it is re-raised."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
