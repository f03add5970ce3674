"""Single-request steps every write shares: a one-request upload, reading back and verifying the
stored object, and deleting one that must not stay.

Used by the part pipeline (objects smaller than one part, the final crc32c check) and by the
strategies (compose parts, lost answers to completion requests); it imports neither.
"""
from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING, Any, Callable

import aiohttp

from ..errors import ChecksumMismatch, FluxError, PreconditionFailed, RetryableError
from ..gcs import http
from ..gcs.checksums import crc_to_b64
from .bodies import body
from .fields import ObjectFields

if TYPE_CHECKING:  # pragma: no cover
    from ..gcs.client import Client


def object_info(client: "Client", bucket: str, resource: dict) -> dict:
    """A JSON object resource as a gcsfs-shaped info dict (name "bucket/key", int size, ...)."""
    return client.object_info(bucket, resource)


async def get_resource(client: "Client", bucket: str, key: str, generation: str | None = None) -> dict:
    """The JSON object resource of `bucket/key` (of one generation if given); FileNotFoundError if absent."""
    params = {"generation": generation} if generation else None
    resp = await http.request(client, "GET", client.json_url("b/{}/o/{}", bucket, key), op="metadata",
                              what=f"{bucket}/{key}", params=params)
    return resp.json()


async def delete_object(client: "Client", bucket: str, key: str, generation: str | None = None) -> None:
    """Delete one object (pinned to `generation` if given); a missing object is not an error."""
    params = {"ifGenerationMatch": generation} if generation else None
    try:
        await http.request(client, "DELETE", client.json_url("b/{}/o/{}", bucket, key), op="delete",
                           what=f"{bucket}/{key}", params=params, ok=(200, 204))
    except (FileNotFoundError, PreconditionFailed):
        pass


def check_crc(resource: dict, crc: int, size: int, what: str) -> None:
    """Raise ChecksumMismatch unless the stored object has exactly the crc32c and size we wrote."""
    got_crc, got_size = resource.get("crc32c"), int(resource.get("size", 0))
    if got_crc != crc_to_b64(crc) or got_size != size:
        raise ChecksumMismatch(
            f"{what}: stored object has crc32c={got_crc} size={got_size}, "
            f"but {size} bytes with crc32c={crc_to_b64(crc)} were written"
        )


def exists_error(bucket: str, key: str) -> FileExistsError:
    """The error of a create-only write ("xb", mode="create") whose object already exists."""
    return FileExistsError(f"{bucket}/{key} already exists (mode 'xb' creates only new objects)")


async def confirm_written(client: "Client", bucket: str, key: str, crc: int, size: int) -> dict | None:
    """After a retried final step failed with 404/412: did an earlier attempt succeed after all?"""
    try:
        resource = await get_resource(client, bucket, key)
    except FileNotFoundError:
        return None
    if resource.get("crc32c") == crc_to_b64(crc) and int(resource.get("size", 0)) == size:
        return resource
    return None


async def answer_or_confirm(client: "Client", resp: http.Response, bucket: str, key: str, crc: int, size: int,
                            what: str) -> dict:
    """The object resource a final upload request (or compose) answered with. An answer cut off or
    garbled on the way comes after the request was carried out: the stored object is then read back
    and accepted only if its size and crc32c are what was sent; otherwise a FluxError says so."""
    try:
        resource = resp.json()
    except ValueError as exc:  # orjson.JSONDecodeError: a truncated or garbled body
        problem = f"{type(exc).__name__}: {exc}"
    else:
        if isinstance(resource, dict):
            return resource
        problem = f"a JSON {type(resource).__name__}, not an object resource"
    found = await confirm_written(client, bucket, key, crc, size)
    if found is not None:
        return found
    raise FluxError(f"{what}: the answer to the final upload request was unreadable ({problem}), and "
                    f"{bucket}/{key} does not hold the {size} bytes with crc32c {crc_to_b64(crc)} that were sent: "
                    "the write did not complete")


async def pin_retry(client: "Client", bucket: str, key: str, crc: int, size: int,
                    params: dict) -> tuple[dict | None, dict]:
    """Before retrying an overwrite that may have landed with its answer lost: (our object, if it is
    there) or the parameters that make the retry apply only to the state just seen (ifGenerationMatch
    its generation, or 0 when absent), so a retry never writes twice nor clobbers a newer write."""
    try:
        resource = await get_resource(client, bucket, key)
    except FileNotFoundError:
        return None, {**params, "ifGenerationMatch": "0"}
    if resource.get("crc32c") == crc_to_b64(crc) and int(resource.get("size", 0)) == size:
        return resource, params
    return None, {**params, "ifGenerationMatch": str(resource["generation"])}


def changed_meanwhile(what: str) -> RetryableError:
    """A pinned retry of an overwrite found another write in between: look again on the next attempt."""
    return RetryableError(412, f"{what}: replaced by another writer while retrying; checking again")


async def upload_single(
    client: "Client", bucket: str, key: str, data: bytes, crc: int, *,
    create_only: bool = False, fields: ObjectFields | None = None,
    stop: Callable[[], bool] | None = None, what: str | None = None,
) -> dict:
    """One multipart/related JSON upload carrying the crc32c, so the server refuses corrupted bytes.

    Returns the object resource after checking its crc32c and size. Retried under the "write"
    policy, never applied twice: for create-only a 412 after a lost response is recognised as our
    own earlier success; an overwrite's retry first looks for its object, then is pinned to the
    generation it saw (`pin_retry`). `stop()` true ends the retries.
    """
    fields = fields or ObjectFields()  # temporaries: application/octet-stream, nothing else
    meta: dict[str, Any] = {**fields.resource(key), "crc32c": crc_to_b64(crc)}
    params: dict[str, Any] = {"uploadType": "multipart", **fields.params()}
    if create_only:
        params["ifGenerationMatch"] = "0"
    what = what or f"{bucket}/{key}"  # errors name the object the user wrote, not a temporary part

    async def attempt(n: int) -> dict:
        if stop is not None and stop():
            raise OSError(f"upload of {what} was aborted")
        boundary = secrets.token_hex(16)
        with aiohttp.MultipartWriter("related", boundary=boundary) as mp:
            mp.append(json.dumps(meta), {"Content-Type": "application/json; charset=UTF-8"})
            mp.append_payload(body(data, meta["contentType"]))
        sent = params
        if n > 0 and not create_only:
            found, sent = await pin_retry(client, bucket, key, crc, len(data), params)
            if found is not None:
                return found
        try:
            resp = await http.request_once(client, "POST", client.upload_url(bucket), what=what, params=sent,
                                           headers={"Content-Type": f"multipart/related; boundary={boundary}"},
                                           data=mp)
        except PreconditionFailed:
            if not create_only:
                raise changed_meanwhile(what) from None
            if n > 0:
                found = await confirm_written(client, bucket, key, crc, len(data))
                if found is not None:
                    return found
            raise exists_error(bucket, key) from None
        resource = await answer_or_confirm(client, resp, bucket, key, crc, len(data), what)
        try:
            check_crc(resource, crc, len(data), what)
        except ChecksumMismatch:
            # Never leave a corrupted object behind (a server that stored it without checking);
            # pinned to its generation so a concurrent writer's object is never touched.
            await delete_object(client, bucket, key, resource.get("generation"))
            raise
        return resource

    return await client.retry_policy("write").run(attempt, what=f"upload {what}")
