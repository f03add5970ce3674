"""gcsfs's own requests (info, ls, mkdir, cp, mv, ...) in fluxfs's terms, as a base class of `FluxFileSystem`.

A timeout names what timed out, errors are redacted and have the types fluxfs's own requests raise
(`errors.from_gcsfs`: a 403 is a PermissionError, not gcsfs's bare OSError), and gcsfs's blocking
property goes through the one bridge.
"""
from __future__ import annotations

import contextvars
from typing import Any

from .errors import from_gcsfs
from .gcs import bridge, http, redact

# Set inside `_get_object`: gcsfs's own errors reach its fallback untranslated.
_GCSFS_403: contextvars.ContextVar[bool] = contextvars.ContextVar("fluxfs_gcsfs_403", default=False)


class GcsfsRequests:
    """Overrides of gcsfs.core.GCSFileSystem's request path; placed before it in FluxFileSystem's bases."""

    async def _call(self, method: str, path: str, *args: Any, **kwargs: Any):
        """gcsfs's own requests (info, ls, mkdir, cp, ...): a timeout says what timed out, as fluxfs's do
        (fsspec turns a bare one into an empty FSTimeoutError), errors are redacted like fluxfs's own and
        have fluxfs's types (a 403 is a PermissionError, a 412 PreconditionFailed, ...: `errors.from_gcsfs`)."""
        parts = [str(a) for a in args]  # bucket, key[, destination bucket, key]
        what = " -> ".join("/".join(parts[i:i + 2]) for i in range(0, len(parts), 2)) or path
        async with http.timeouts_named(self, what, method.upper()), redact.scrubbing():
            try:
                return await super()._call(method, path, *args, **kwargs)
            except Exception as exc:
                mapped = None if _GCSFS_403.get() else from_gcsfs(
                    exc, what, create_only=str(kwargs.get("ifGenerationMatch")) == "0")
                if mapped is None:
                    raise
                raise mapped from exc

    async def _get_object(self, path):
        """gcsfs's, whose fallback to a listing when the object's GET is denied looks for gcsfs's own 403
        error: it gets that one, and what escapes is mapped to fluxfs's types here."""
        token = _GCSFS_403.set(True)
        try:
            return await super()._get_object(path)
        except Exception as exc:
            mapped = from_gcsfs(exc, path)
            if mapped is None:
                raise
            raise mapped from exc
        finally:
            _GCSFS_403.reset(token)

    @property
    def buckets(self) -> list[str]:
        """Names of the project's buckets (gcsfs's property, through the bridge)."""
        return [b["name"] for b in bridge.run(self, self._list_buckets)]
