"""How many components a compose write may have on this filesystem's server, and finding out.

GCS documents no component limit today, so compose writes may have up to the `compose_max_components`
option's parts (32,768 by default). Older deployments and some GCS-compatible servers refuse composites
of more than 1,024 components, which a write would otherwise learn only at close, after uploading
everything. So the first compose write of a filesystem that needs more than `PROBE_AT` (1,024) parts
asks the server once, with zero-byte temporaries: it composes one of exactly PROBE_AT + 1 components. A
refusal (HTTP 400) fails that write at once, naming the limit, and later writes of the filesystem stay
under it (parts grow faster to make up for it).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..errors import HttpError
from ..gcs.limits import LEGACY_MAX_COMPONENTS

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client
    from .compose import ComposeUploader

logger = logging.getLogger(__name__)

#: Component counts above this are checked with the server before a write goes past them (tests lower it).
PROBE_AT = LEGACY_MAX_COMPONENTS


def component_cap(client: "Client") -> int:
    """The most parts a compose write of `client` may have: the option, or the server's limit once known."""
    learned = client.refused.compose_component_limit
    option = client.options.compose_max_components
    return option if learned is None else min(option, learned)


def needs_probe(client: "Client", part_number: int) -> bool:
    """Whether part `part_number` is the first past PROBE_AT and the server has not been asked yet."""
    return part_number == PROBE_AT + 1 and not client.refused.compose_component_probed


async def probe(up: "ComposeUploader") -> None:
    """Compose a zero-byte temporary into one of PROBE_AT + 1 components; a refusal fails the write."""
    client = up.client
    target = PROBE_AT + 1
    doubles: list[dict] = []   # doubles[k]: a temporary of 2**k components
    try:
        doubles.append(await up.upload_temp(b"", 0))
        while 2 ** len(doubles) <= target:
            doubles.append(await up.compose_temp([doubles[-1], doubles[-1]]))
        await up.compose_temp([d for k, d in enumerate(doubles) if target >> k & 1])
    except HttpError as exc:
        if exc.status != 400 or not doubles:
            raise
        accepted = 2 ** (len(doubles) - 1)   # the largest composite the server made
        client.refused.compose_component_probed = True
        client.refused.compose_component_limit = accepted
        raise ValueError(
            f"{up.pw.what}: the server refuses composite objects of more than {accepted} components ({exc}); "
            "GCS has no such limit today, older deployments and some GCS-compatible servers do. This write "
            f"needs more parts; write it again: compose writes of this filesystem now stay under {accepted} "
            f"components (set compose_max_components={accepted} to start that way). Nothing was kept") from None
    client.refused.compose_component_probed = True
    logger.debug("the server accepts composites of %d components", target)
