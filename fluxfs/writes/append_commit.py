"""Committing an append: compose [the object, the appended part] onto the object, pinned by generation.

The compose carries ``ifGenerationMatch`` = the generation the appender last saw (0 when the object did
not exist), and its first source is pinned to that generation. A concurrent appender that committed in
between makes ours fail with 412 instead of overwriting its bytes; we then read the new generation and
compose again onto it (at most `MAX_RACES` times, with a jittered pause), so both appends land, in some
order. A compose has two sources (however large the append: the part is one object, uploaded by the
write pipeline), far under GCS's 32. When the composite would have more components than GCS allows,
the object's current bytes are first copied into a fresh temporary, composed with the part instead.
Every temporary is deleted whatever happens.
"""
from __future__ import annotations

import asyncio
import random
import re
from typing import TYPE_CHECKING, Any

from .. import temporaries
from ..errors import ChecksumMismatch, PreconditionFailed
from ..gcs import http, tempnames
from ..gcs.checksums import crc32c_combine, crc_from_b64, crc_to_b64
# Appends flatten at the legacy limit: harmless on GCS (a copy every 1,024 appends), needed on servers keeping it.
from ..gcs.limits import LEGACY_MAX_COMPONENTS as MAX_COMPONENTS
from .fields import FIXED_KEYS, ObjectFields, object_fields
from .uploads import _upload_chunks

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client

MAX_RACES = 16          # commits lost to concurrent writers before an append gives up (and says so)
RACE_PAUSE_S = 0.05     # first pause after a lost race; doubles, jittered, up to 1 s
TEMP_KIND = "append"    # temporaries live under <temp_prefix>append/<job>/, marked as the job's


def new_temp(client: "Client", bucket: str) -> str:
    """A fresh temporary's "bucket/key", registered before anything creates it."""
    path = f"{bucket}/{tempnames.temp_key(client.job_id, TEMP_KIND, client.options.temp_prefix)}"
    temporaries.register(client, path)
    return path


async def current_resource(client: "Client", bucket: str, key: str) -> dict | None:
    """The object's JSON resource now, or None when it does not exist."""
    try:
        resp = await http.request(client, "GET", client.json_url("b/{}/o/{}", bucket, key), op="metadata",
                                  what=f"{bucket}/{key}")
    except FileNotFoundError:
        return None
    return resp.json()


def destination_fields(key: str, base: dict | None, given: dict[str, Any]) -> ObjectFields:
    """What the appended object keeps: the existing object's content type, metadata, fixed-key metadata
    and KMS key, each replaced by what the caller gave to open(); a new object's as a "wb" write's."""
    if base is None:
        return object_fields(key, **given)
    fixed = {name: base[name] for name in FIXED_KEYS.values() if base.get(name)}
    for k, v in (given.get("fixed_key_metadata") or {}).items():
        fixed[FIXED_KEYS.get(k, k)] = v
    kms = given.get("kms_key_name") or re.sub(r"/cryptoKeyVersions/.*$", "", base.get("kmsKeyName") or "")
    metadata = given.get("metadata") if given.get("metadata") is not None else base.get("metadata")
    return object_fields(key, given.get("content_type") or base.get("contentType"), metadata, fixed, kms or None)


def components(resource: dict) -> int:
    """Components an object counts for in a composite (a non-composite object is one)."""
    return int(resource.get("componentCount") or 1)


def _crc(resource: dict) -> int:
    return crc_from_b64(resource.get("crc32c")) or 0


async def commit_append(client: "Client", bucket: str, key: str, base: dict | None, part: dict,
                        given: dict[str, Any]) -> dict:
    """Append the temporary object `part` (a JSON resource, "name" its key) to `bucket/key`, whose
    resource was `base` (None: absent) when the appender opened it; returns the new object's resource.

    Deletes `part` (and any copy made for the component limit) on every exit path.
    """
    what = f"{bucket}/{key}"
    made: dict[str, str | None] = {}  # copies for the component limit: "bucket/key" -> generation
    try:
        for race in range(MAX_RACES):
            if race:
                await asyncio.sleep(random.uniform(0.5, 1.0) * min(1.0, RACE_PAUSE_S * 2 ** (race - 1)))
            try:
                first = base
                if base is not None and components(base) + components(part) > MAX_COMPONENTS:
                    first = await _flatten(client, bucket, base, made)
                return await _compose(client, bucket, key, base, first, part, destination_fields(key, base, given))
            except (PreconditionFailed, FileNotFoundError):
                seen = base
                base = await current_resource(client, bucket, key)
                if (base or {}).get("generation") == (seen or {}).get("generation"):
                    raise  # the object did not change: the failure is not a race (a part gone, say)
        raise PreconditionFailed(
            412, f"{what}: appending {part.get('size')} bytes failed: the object changed {MAX_RACES} times while "
                 f"this append was being committed (concurrent writers); nothing was appended, retry the append")
    finally:
        # By generation: in a versioned bucket a plain delete would keep them as noncurrent versions.
        await temporaries.delete_many(client, {f"{bucket}/{part['name']}": part.get("generation"), **made})


async def _compose(client: "Client", bucket: str, key: str, base: dict | None, first: dict | None,
                   part: dict, fields: ObjectFields) -> dict:
    """One compose of [first, part] (or [part] alone when there is no object yet) onto `key`, on
    condition that the object is still at `base`'s generation; the result's crc32c is checked."""
    sources = [s for s in (first, part) if s is not None]
    body = {"sourceObjects": [{"name": s["name"], "generation": s["generation"]} for s in sources],
            "destination": fields.resource()}
    params = {**fields.params(), "ifGenerationMatch": base["generation"] if base is not None else "0"}
    size, crc = 0, 0
    for s in sources:
        crc, size = crc32c_combine(crc, _crc(s), int(s["size"])), size + int(s["size"])
    what = f"{bucket}/{key}"

    async def attempt(n: int) -> dict:
        sends: list = []  # aiohttp may re-send a request once, silently, after a lost answer
        try:
            resp = await http.request_once(client, "POST", client.json_url("b/{}/o/{}/compose", bucket, key), what=what,
                                           params=params, json=body, sends=sends)
        except (PreconditionFailed, FileNotFoundError):
            # An earlier send may have landed and lost its answer (the retry then finds the object's
            # generation, or the source generation it pinned, gone): is the object now ours?
            if n > 0 or len(sends) > 1:
                now = await current_resource(client, bucket, key)
                if now is not None and now.get("crc32c") == crc_to_b64(crc) and int(now.get("size", 0)) == size:
                    return now
            raise
        return resp.json()

    resource = await client.retry_policy("compose").run(attempt, what=f"append to {what}")
    if resource.get("crc32c") != crc_to_b64(crc) or int(resource.get("size", 0)) != size:
        raise ChecksumMismatch(f"{what}: after appending, the object has crc32c={resource.get('crc32c')} "
                               f"size={resource.get('size')}, expected {crc_to_b64(crc)} and {size} bytes")
    return resource


async def _flatten(client: "Client", bucket: str, base: dict, made: dict[str, str | None]) -> dict:
    """Copy the object's bytes at `base`'s generation into a new temporary of few components (for an
    object at the component limit); its crc32c must match the original's."""
    path = new_temp(client, bucket)
    made[path] = None
    url, what = client.json_url("b/{}/o/{}", bucket, base["name"]), f"{bucket}/{base['name']}"
    pos = 0

    async def read(n: int) -> bytes:
        nonlocal pos
        if n == 0:
            return b""
        resp = await http.request(client, "GET", url, op="read", what=what, ok=(200, 206),
                                  params={"alt": "media", "generation": base["generation"]},
                                  headers={"Range": f"bytes={pos}-{pos + n - 1}"})
        if len(resp.body) != n:
            raise OSError(f"{what}: read {len(resp.body)} bytes at offset {pos}, expected {n}")
        pos += n
        return resp.body

    info = await _upload_chunks(client, path, int(base.get("size", 0)), read, create_only=False,
                               fields=ObjectFields(metadata=tempnames.marker(client.job_id)))
    made[path] = info.get("generation")
    if info.get("crc32c") != base.get("crc32c"):
        raise ChecksumMismatch(f"{what}: copy for appending has crc32c={info.get('crc32c')}, "
                               f"the object has {base.get('crc32c')}")
    return {**info, "name": path.split("/", 1)[1]}
