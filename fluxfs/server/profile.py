"""The server's cloud profile and fault injection: latency, bandwidth, rate limit, seeded faults, lost answers,
auth, and the habits of other GCS-compatible servers (zero-valued fields left out, other error bodies).

One ``Profile`` per server; the dispatcher asks it, per request, whether to let the request through.
"""
from __future__ import annotations

import random
import time
from typing import Any, Dict, Iterable, Optional, Tuple

from ..gcs.checksums import crc32c
from ..gcs.limits import XML_MAX_PARTS

OPS = ("list", "read", "write", "compose", "delete", "copy", "metadata", "bucket")

# Presets applied by ``profile=``; "cloud" approximates one GCS request seen from a VM:
# 30 ms to the first byte, then about 100 MB/s per stream.
PRESETS = {"local": {}, "cloud": {"latency_ms": 30.0, "bandwidth_mbps": 100.0}}

ERROR_STYLES = ("gcs", "bare", "nested", "text")

DEFAULTS: Dict[str, Any] = {
    "profile": "local",
    "latency_ms": 0.0,         # delay before the first byte of every data-plane response
    "bandwidth_mbps": 0.0,     # per-request body cap in MB/s (10**6 bytes); 0 = unlimited
    "link_mbps": 0.0,          # cap on all bodies going one way together in MB/s (the link every request shares,
                               # e.g. a node's share of its NIC: answers out and uploads in, each at this rate,
                               # HTTP and gRPC alike); 0 = unlimited
    "rate_limit": 0.0,         # requests/s over the whole server (token bucket, 1 s burst); 0 = off
    "fail_rate": 0.0,          # fraction of requests answered with one of fail_codes
    "fail_codes": (429, 503),
    "reset_rate": 0.0,         # fraction of requests whose connection is reset mid-body
    "fail_ops": None,          # ops that faults apply to; None = all
    "seed": 0,
    "deny_ops": frozenset(),   # ops answered 403
    "require_token": None,     # bearer token required on every request (control endpoints too, but health)
    "read_only_token": None,   # bearer token of a read-only caller (objectViewer): every write it sends is
                               # answered 403 as GCS words it; it also passes require_token for reads
    "allowed_hosts": (),       # Host names accepted besides loopback names and the listening address (guard.py)
    "min_part_size": 5 * 1024 * 1024,  # XML multipart: every part but the last must be this big
    "max_parts": XML_MAX_PARTS,         # XML multipart: the highest part number (tests lower it)
    "max_components": None,   # components of one composite object: None = no limit, as GCS documents today;
                              # a number emulates a server that has one (older GCS deployments: 1024)
    # Behaving like servers we did not write:
    "omit_zero_fields": False,  # JSON resources leave out zero-valued fields (size "0", false, "")
    "error_style": "gcs",       # JSON API error bodies: "gcs" {"error": {code, message, errors[]}}, "bare" (no
                                # errors[]), "nested" (message is itself a JSON-encoded error), "text" (plain)
    "resumable_ttl_s": 7 * 24 * 3600.0,  # a resumable session ends this long after it starts (GCS: a week)
    "xml_multipart": True,      # False: XML multipart initiates are answered 501, as by servers without it
    "lose_replies": 0,          # the next N requests (of fail_ops) are carried out, then the connection
                                # closes without an answer (gRPC: the stream ends UNAVAILABLE before it): the
                                # client cannot tell whether they happened
    "cut_replies": 0,           # the next N successful answers with a body (of fail_ops) are carried out and
                                # sent with the body cut in half: a truncated, unparsable answer
    "corrupt_pieces": 0,        # the next N gRPC read pieces go out with one byte flipped: their crc32c is of the
                                # bytes as stored (corrupted in transit), or with `corrupt_at_source` of the flipped
                                # ones (bad bytes at the source: only the whole object's crc32c tells)
    "corrupt_at_source": False,
    "stall_after": None,        # requests (of fail_ops) stop moving after this many body bytes: the server stops
                                # reading an upload, or sending an answer, until the setting is cleared or the
                                # client hangs up (a server stopped with SIGSTOP, a stuck proxy); None = off
}


def _ops(value: Optional[Iterable[str]], key: str) -> Optional[frozenset]:
    if value is None:
        return None
    if isinstance(value, str):
        value = [v for v in value.split(",") if v]
    ops = frozenset(value)
    bad = ops - set(OPS)
    if bad:
        raise ValueError(f"{key}: unknown op(s) {sorted(bad)}; known: {', '.join(OPS)}")
    return ops


class Profile:
    """Current settings plus the seeded RNG and rate-limit state."""

    def __init__(self, **settings: Any):
        self.s: Dict[str, Any] = dict(DEFAULTS)
        self.rng = random.Random(0)
        self._tokens = 0.0
        self._t = time.monotonic()
        self._link_free = [0.0, 0.0]  # when the shared link has carried every byte handed to it so far: out, in
        self.configure(**settings)

    def configure(self, **settings: Any) -> Dict[str, Any]:
        """Partial update; ``profile=`` first resets every setting to the preset."""
        unknown = set(settings) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"unknown server setting(s): {sorted(unknown)}")
        if "profile" in settings:
            name = settings["profile"]
            if name not in PRESETS:
                raise ValueError(f"unknown profile {name!r}; known: {', '.join(PRESETS)}")
            self.s = dict(DEFAULTS, profile=name, **PRESETS[name])
            self.rng = random.Random(self.s["seed"])
        new = dict(self.s)
        for k, v in settings.items():
            if k == "profile":
                continue
            if k in ("latency_ms", "bandwidth_mbps", "link_mbps", "rate_limit", "fail_rate", "reset_rate",
                     "resumable_ttl_s"):
                v = float(v or 0)
                if v < 0 or (k in ("fail_rate", "reset_rate") and v > 1):
                    raise ValueError(f"{k} out of range: {v}")
            elif k == "fail_codes":
                if isinstance(v, str):
                    v = [c for c in v.split(",") if c]
                v = tuple(int(c) for c in (v if isinstance(v, (list, tuple, set, frozenset)) else [v]))
                if not v or any(c < 400 or c > 599 for c in v):
                    raise ValueError(f"fail_codes must be HTTP error codes, got {v}")
            elif k == "fail_ops":
                v = _ops(v, k) or None
            elif k == "deny_ops":
                v = _ops(v, k) or frozenset()
            elif k == "seed":
                v = int(v)
            elif k in ("require_token", "read_only_token"):
                v = str(v) if v else None
            elif k == "allowed_hosts":
                if isinstance(v, str):
                    v = [h for h in v.split(",") if h]
                v = tuple(str(h).strip().lower() for h in (v or ()))
            elif k == "stall_after":
                v = None if v is None or v == "" else int(v)
                if v is not None and v < 0:
                    raise ValueError(f"stall_after must not be negative: {v}")
            elif k in ("min_part_size", "lose_replies", "cut_replies", "corrupt_pieces"):
                v = int(v)
                if v < 0:
                    raise ValueError(f"{k} must not be negative: {v}")
            elif k == "max_components" and v in (None, "", "none", "None"):
                v = None  # no limit
            elif k in ("max_parts", "max_components"):
                v = int(v)
                if v < 1:
                    raise ValueError(f"{k} must be at least 1: {v}")
            elif k in ("omit_zero_fields", "xml_multipart", "corrupt_at_source"):
                v = bool(v)
            elif k == "error_style":
                if v not in ERROR_STYLES:
                    raise ValueError(f"error_style must be one of {', '.join(ERROR_STYLES)}, not {v!r}")
            new[k] = v
        self.s = new
        if "seed" in settings:
            self.rng = random.Random(self.s["seed"])
        if "rate_limit" in settings or "profile" in settings:
            self._tokens = self.s["rate_limit"]
            self._t = time.monotonic()
        return self.public()

    def public(self) -> Dict[str, Any]:
        """Settings as JSON-friendly values (never the token itself)."""
        out = {}
        for k, v in self.s.items():
            if isinstance(v, (frozenset, set, tuple)):
                v = sorted(v)
            out[k] = v
        out["require_token"] = bool(self.s["require_token"])
        out["read_only_token"] = bool(self.s["read_only_token"])
        return out

    # -- per-request decisions (hot path: keep cheap) --
    def rate_ok(self) -> bool:
        rate = self.s["rate_limit"]
        if not rate:
            return True
        now = time.monotonic()
        self._tokens = min(rate, self._tokens + (now - self._t) * rate)
        self._t = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def link_wait(self, n: int, now: float, inbound: bool = False) -> float:
        """Seconds until `n` more bytes have crossed the link all bodies going that way share (answers out,
        uploads `inbound`; 0 without `link_mbps`): bytes queue for it in the order they are handed over, as on a
        real full-duplex link."""
        rate = self.s["link_mbps"]
        if not rate:
            return 0.0
        way = int(inbound)
        self._link_free[way] = max(self._link_free[way], now) + n / (rate * 1e6)
        return self._link_free[way] - now

    def _faulted(self, op: str) -> bool:
        """Whether faults apply to `op` (`fail_ops`: None is all)."""
        ops = self.s["fail_ops"]
        return ops is None or op in ops

    def _spend(self, counter: str, op: str) -> bool:
        """Whether `counter` (a number of replies to spoil) has one left for `op`: spent if so."""
        if not self.s[counter] or not self._faulted(op):
            return False
        self.s[counter] -= 1
        return True

    def lose_reply(self, op: str) -> bool:
        """Whether to carry out this request and then close the connection without answering."""
        return self._spend("lose_replies", op)

    def cut_reply(self, op: str) -> bool:
        """Whether to send this (successful, non-empty) answer with its body cut in half."""
        return self._spend("cut_replies", op)

    def corrupt(self, content: bytes, crc: int) -> Tuple[bytes, int]:
        """(content, crc32c) of a gRPC read piece as sent: a byte flipped while `corrupt_pieces` lasts."""
        if not self.s["corrupt_pieces"] or not content:
            return content, crc
        self.s["corrupt_pieces"] -= 1
        bad = bytearray(content)
        bad[len(bad) // 2] ^= 0xFF
        return bytes(bad), (crc32c(bytes(bad)) if self.s["corrupt_at_source"] else crc)

    def stall_at(self, op: Optional[str]) -> Optional[int]:
        """After how many body bytes a request of `op` stops moving, or None."""
        at = self.s["stall_after"]
        return at if at is not None and op is not None and self._faulted(op) else None

    def fault(self, op: str) -> Tuple[Optional[int], bool]:
        """(status code to fail with or None, reset the connection mid-body?)."""
        s = self.s
        if not (s["fail_rate"] or s["reset_rate"]) or not self._faulted(op):
            return None, False
        if s["fail_rate"] and self.rng.random() < s["fail_rate"]:
            return self.rng.choice(s["fail_codes"]), False
        if s["reset_rate"] and self.rng.random() < s["reset_rate"]:
            return None, True
        return None, False
