"""Upload strategy "compose": a parallel composite upload for servers without XML multipart.

Each part is a temporary object under `tempnames.TEMP_PREFIX`; on close they are composed into
the destination in a tree (GCS composes at most 32 sources per call), and every temporary is
deleted whatever happens: temporaries are registered with `fluxfs.temporaries` before they are created,
so one a crash or an interrupt leaves behind is deleted at exit or by `fluxfs cleanup`. Sources are
pinned by generation so a stray writer cannot slip in.
"""
from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from .. import temporaries
from ..errors import PreconditionFailed, UploadLost
from ..gcs import http, tempnames
from ..gcs.limits import MAX_COMPOSE_SOURCES
from ..gcs.checksums import crc32c_combine
from . import compose_limit
from .bodies import DEFAULT_CONTENT_TYPE
from .fields import ObjectFields
from .single import (answer_or_confirm, changed_meanwhile, check_crc, confirm_written, exists_error, pin_retry,
                     upload_single)
from .strategy import BaseUploader

if TYPE_CHECKING:  # pragma: no cover
    from .parts import PartWriter


class ComposeUploader(BaseUploader):
    """Parts as temporary objects, composed at completion."""

    # Every part is one component of the final composite, whatever the tree of 32-source steps: part
    # sizes grow to stay under the cap (writes/schedule.py), the filesystem's (compose_limit.py).
    max_parts: "int | None" = None  # per write: `part_cap`
    cap_setting = "compose_max_components"
    fields_at_complete = True
    drain_on_abort = True  # a cancelled part upload may still land on the server: wait, then delete

    def __init__(self, pw: "PartWriter"):
        super().__init__(pw)
        self.bucket = pw.bucket
        # Every temporary we may have created (registered before its request is sent, so a part
        # cancelled mid-flight is still deleted on abort).
        self.temps: list[str] = []
        self.generations: dict[str, str] = {}  # key -> generation, once created: deleted by generation
        self.max_parts = self.part_cap(self.client)

    @classmethod
    def part_cap(cls, client) -> int:
        return compose_limit.component_cap(client)

    def _new_temp(self) -> str:
        key = tempnames.temp_key(self.client.job_id, "upload", self.client.options.temp_prefix)
        self.temps.append(key)
        temporaries.register(self.client, f"{self.bucket}/{key}")
        return key

    async def start(self) -> None:
        return None

    async def upload_part(self, number: int, data: bytes, crc: int) -> dict:
        if number > self.max_parts:  # refused before uploading, not by the final compose
            raise ValueError(f"{self.pw.what}: more than {self.max_parts} parts, the most components this compose "
                             f"upload takes: the object is larger than GCS's {self.max_object_size}-byte limit")
        if compose_limit.needs_probe(self.client, number):  # past 1,024: does the server allow more components?
            await compose_limit.probe(self)
        return await self.upload_temp(data, crc)

    async def upload_temp(self, data: bytes, crc: int) -> dict:
        """`data` as a new temporary object; its source entry for a compose."""
        key = self._new_temp()
        # Created only if absent: the name is new, and a retry after a lost answer finds its own part.
        # Marked as this job's temporary, so cleanup may delete it (and nothing it did not create).
        resource = await upload_single(self.client, self.bucket, key, data, crc, create_only=True,
                                       stop=lambda: self.pw.aborted, what=self.pw.what,
                                       fields=ObjectFields(metadata=tempnames.marker(self.client.job_id)))
        self._created(key, resource["generation"])
        return {"name": key, "generation": resource["generation"], "crc": crc, "size": len(data)}

    def _created(self, key: str, generation: object) -> None:
        self.generations[key] = str(generation)
        temporaries.registry(self.client).set_generation(f"{self.bucket}/{key}", str(generation))

    async def compose_temp(self, group: list[dict]) -> dict:
        """`group` composed into a new temporary (checked by crc32c); its source entry."""
        crc, size = group[0]["crc"], group[0]["size"]
        for s in group[1:]:
            crc, size = crc32c_combine(crc, s["crc"], s["size"]), size + s["size"]
        key = self._new_temp()
        resource = await self._compose(group, key, crc, size, create_only=True)
        self._created(key, resource["generation"])
        check_crc(resource, crc, size, f"{self.bucket}/{key}")
        return {"name": key, "generation": resource["generation"], "crc": crc, "size": size}

    async def _compose(self, sources: list[dict], dest: str, crc: int, size: int, *, create_only: bool,
                       final: bool = False) -> dict:
        """Compose `sources` into `dest` (`crc`, `size`: what it must hold), never applied twice: a create-only
        retry after a lost answer finds its own object; an overwrite's retry is pinned (`pin_retry`)."""
        body: dict = {
            "sourceObjects": [{"name": s["name"], "generation": s["generation"]} for s in sources],
            # Temporaries are plain bytes; the destination gets every field of the write.
            "destination": self.pw.fields.resource() if final else
            {"contentType": DEFAULT_CONTENT_TYPE, "metadata": tempnames.marker(self.client.job_id)},
        }
        params = dict(self.pw.fields.params()) if final else {}
        if create_only:
            params["ifGenerationMatch"] = "0"
        what = f"{self.bucket}/{dest}"

        async def attempt(n: int) -> dict:
            sent = params
            if n > 0 and not create_only:
                found, sent = await pin_retry(self.client, self.bucket, dest, crc, size, params)
                if found is not None:
                    return found
            try:
                url = self.client.json_url("b/{}/o/{}/compose", self.bucket, dest)
                resp = await http.request_once(self.client, "POST", url,
                                               what=what, params=sent or None, json=body)
            except FileNotFoundError:
                # The bucket was there for the parts: what is missing now is the parts themselves.
                raise UploadLost(f"{self.pw.what}: its uploaded parts were deleted on the server (`fluxfs cleanup` "
                                 f"elsewhere?) before they were composed; nothing was written") from None
            except PreconditionFailed:
                if not create_only:
                    raise changed_meanwhile(what) from None
                if n > 0:  # our earlier attempt landed, its answer was lost
                    found = await confirm_written(self.client, self.bucket, dest, crc, size)
                    if found is not None:
                        return found
                raise exists_error(self.bucket, self.pw.key) from None
            return await answer_or_confirm(self.client, resp, self.bucket, dest, crc, size, what)

        return await self.client.retry_policy("compose").run(attempt, what=f"compose {what}")

    async def _compose_level(self, level: list[dict]) -> list[dict]:
        """Compose groups of 32 into intermediate temporaries (checked by crc32c), in parallel."""
        sem = asyncio.Semaphore(max(1, self.pw.concurrency))

        async def one(group: list[dict]) -> dict:
            async with sem:
                return await self.compose_temp(group)

        groups = [level[i:i + MAX_COMPOSE_SOURCES] for i in range(0, len(level), MAX_COMPOSE_SOURCES)]
        return list(await asyncio.gather(*(one(g) for g in groups)))

    async def complete(self, results: list, size: int, crc: int, tail: bytes, tail_crc: int) -> dict:
        try:
            level = list(results)
            while len(level) > MAX_COMPOSE_SOURCES:
                level = await self._compose_level(level)
            return await self._compose(level, self.pw.key, crc, size, create_only=self.pw.create_only, final=True)
        finally:
            await self._delete_temps()

    async def abort(self) -> None:
        await self._delete_temps()

    async def _delete_temps(self) -> None:
        temps, self.temps = self.temps, []
        if temps:
            # By generation (a versioned bucket would keep a plain delete's); a part cancelled mid-flight
            # may exist without us knowing its generation: `delete` looks it up.
            await temporaries.delete_many(self.client, {f"{self.bucket}/{k}": self.generations.get(k) for k in temps})
