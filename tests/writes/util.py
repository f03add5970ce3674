"""Helpers for the write tests: payloads, piecewise writes, and what a server still holds."""
from __future__ import annotations

import random

from fluxfs.gcs.tempnames import TEMP_PREFIX
from tests.listing.helpers import sequential_names

KiB = 1024
MiB = 1024 * KiB
COMPOSE_PART = 256 * KiB  # compose parts have no minimum size: small keeps the tests fast
XML_PART = 5 * MiB        # GCS (and the fluxfs server) refuse XML parts < 5 MiB except the last
OFF_PART = 256 * KiB      # resumable chunks must be multiples of 256 KiB

PART_SIZES = {"xml": XML_PART, "compose": COMPOSE_PART, "resumable": OFF_PART}


def payload(size: int, seed: int = 0) -> bytes:
    """Deterministic incompressible bytes, different per seed."""
    return random.Random(seed).randbytes(size)


def write_in_pieces(f, data: bytes, piece: int = 100_003) -> None:
    """Write like torch.save does: many calls of odd sizes that straddle part boundaries."""
    view = memoryview(data)
    for i in range(0, len(data), piece):
        f.write(view[i:i + piece])


def raw_names(server, bucket: str, prefix: str = "") -> list[str]:
    """Object names as the server lists them (no fluxfs filtering), for either server."""
    return sequential_names(server.url, bucket, prefix)


def temp_leftovers(server, bucket: str) -> list[str]:
    return raw_names(server, bucket, TEMP_PREFIX)
