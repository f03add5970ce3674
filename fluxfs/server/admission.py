"""One admission path for every request, HTTP (app.py) or gRPC (grpc/status.py): the profile's auth (the required
and the read-only bearer token), denied ops, the rate limit (429), injected faults (429/503, resets), lost and cut
answers, the first-byte latency and the pace of bodies (`bandwidth_mbps` per body, `link_mbps` shared by all),
counted in the server's stats the same way whichever protocol carried the request."""
from __future__ import annotations

import asyncio
from contextlib import contextmanager
from typing import Any, Iterator, List, Optional

from .errors import ServerError
from .profile import Profile

# The permission GCS names when a caller without write access tries each op (IAM's storage.* permissions).
_PERMISSION = {"write": "storage.objects.create", "compose": "storage.objects.create", "copy": "storage.objects.create",
               "delete": "storage.objects.delete", "metadata": "storage.objects.update",
               "bucket": "storage.buckets.update", "folder": "storage.folders.create"}
# What a read-only role (objectViewer) holds of what testIamPermissions may ask about.
READ_PERMISSIONS = frozenset({"storage.objects.get", "storage.objects.list", "storage.folders.get",
                              "storage.folders.list", "storage.managedFolders.get", "storage.managedFolders.list"})
# Who the read-only token stands for in GCS's "<principal> does not have <permission> access" message.
READ_ONLY_PRINCIPAL = "read-only-caller@fluxfs.iam.gserviceaccount.com"


class Admitted:
    """A request let through: whether its body is to be cut midway (`reset_rate`), and whether it is carried out
    and then its answer lost (`lose_replies`: the connection, or the gRPC stream, closes before the answer)."""

    __slots__ = ("op", "reset", "lost")

    def __init__(self, op: str, reset: bool, lost: bool):
        self.op, self.reset, self.lost = op, reset, lost


def bearer(authorization: Optional[str]) -> Optional[str]:
    """The token of an `Authorization: Bearer TOKEN` header (HTTP) or `authorization` metadata (gRPC)."""
    if authorization is None or not authorization.startswith("Bearer "):
        return None
    return authorization[len("Bearer "):]


def check_access(profile: Profile, op: str, token: Optional[str], writes: bool) -> None:
    """ServerError (401/403) unless the caller may do this: the required token (or the read-only one) when one is
    required, no write with the read-only token, no denied op."""
    s = profile.s
    required, read_only = s["require_token"], s["read_only_token"]
    if required is not None and token != required and (read_only is None or token != read_only):
        raise ServerError(401, "Anonymous caller does not have storage access (missing or wrong bearer token).",
                          "required")
    if writes and read_only is not None and token == read_only:
        perm = _PERMISSION.get(op, "storage.objects.create")
        raise ServerError(403, f"{READ_ONLY_PRINCIPAL} does not have {perm} access to the Google Cloud Storage "
                               f"object. Permission '{perm}' denied on resource (or it may not exist).", "forbidden")
    if op in s["deny_ops"]:
        raise ServerError(403, f"The caller does not have permission for '{op}' operations.", "forbidden")


def granted(profile: Profile, token: Optional[str], permissions: List[str]) -> List[str]:
    """Which of `permissions` the caller holds (testIamPermissions): the read-only token only reading ones."""
    read_only = profile.s["read_only_token"]
    if read_only is not None and token == read_only:
        return [p for p in permissions if p in READ_PERMISSIONS]
    return list(permissions)


def admit(srv: Any, op: str, token: Optional[str], writes: bool, body: bool = True) -> Admitted:
    """Count one request of `op` and let it through, or raise the ServerError it is refused with (counted as a
    fault when injected: the rate limit, `fail_rate`). A request without a `body` to cut is never reset."""
    srv.requests[op] += 1
    prof = srv.profile
    check_access(prof, op, token, writes)
    if not prof.rate_ok():
        srv.faults[op] += 1
        raise ServerError(429, "The rate of requests exceeds the limit; reduce your request rate.",
                          "rateLimitExceeded")
    code, reset = prof.fault(op)
    if code is not None:
        srv.faults[op] += 1
        raise ServerError(code, f"Injected fault ({code}) for a '{op}' request.",
                          "rateLimitExceeded" if code == 429 else "backendError")
    reset = reset and body
    lost = prof.lose_reply(op)
    if reset or lost:
        srv.faults[op] += 1
    return Admitted(op, reset, lost)


def cut(srv: Any, op: str) -> bool:
    """Whether this answer (successful, with a body) goes out cut in half (`cut_replies`), counted as a fault."""
    if srv.profile.cut_reply(op):
        srv.faults[op] += 1
        return True
    return False


async def latency(srv: Any) -> None:
    """The profile's first-byte latency."""
    ms = srv.profile.s["latency_ms"]
    if ms:
        await asyncio.sleep(ms / 1000.0)


@contextmanager
def in_flight(srv: Any, op: str) -> Iterator[None]:
    """Count `op` as being served (stats' in_flight and peak_in_flight) while the block runs."""
    srv.in_flight[op] += 1
    if srv.in_flight[op] > srv.peak_in_flight[op]:
        srv.peak_in_flight[op] = srv.in_flight[op]
    try:
        yield
    finally:
        srv.in_flight[op] -= 1


class Pacer:
    """The pace of one body: its own cap (`bandwidth_mbps`, MB/s) and the link every body going the same way shares
    (`link_mbps`: answers out, uploads in, as a full-duplex NIC carries them); `pace(n)` waits until `n` more bytes
    may have crossed both."""

    def __init__(self, profile: Profile, inbound: bool = False):
        self.profile = profile
        self.bw = profile.s["bandwidth_mbps"]
        self.link = profile.s["link_mbps"]
        self.inbound = inbound
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        self.sent = 0

    @property
    def paced(self) -> bool:
        return bool(self.bw or self.link)

    def restart(self) -> None:
        """Time spent waiting (first-byte latency, an idle stream) is no bandwidth saved up for a burst."""
        if self.bw:
            self.t0 = self.loop.time() - self.sent / (self.bw * 1e6)

    def delay(self, n: int) -> float:
        """Seconds until `n` more bytes (the next chunk) may have arrived: what the caller waits before sending."""
        self.sent += n
        if not self.bw and not self.link:
            return 0.0
        now = self.loop.time()
        own = self.t0 + self.sent / (self.bw * 1e6) - now if self.bw else 0.0
        return max(own, self.profile.link_wait(n, now, self.inbound) if self.link else 0.0)

    async def pace(self, n: int) -> None:
        wait = self.delay(n)
        if wait > 0:
            await asyncio.sleep(wait)
