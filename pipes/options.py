"""Storage options, one spelling everywhere in fluxfs.pipes: ``storage_options={...}``, keyword options, or both.

Datasets, Nodes, `FluxCheckpoint`, the DCP writer and reader and `FluxCheckpointIO` all take
``storage_options={"endpoint_url": ...}`` and ``endpoint_url=...`` alike; both together are merged,
and one option given both ways with different values is a TypeError naming it (never a silent pick),
as is a keyword option no filesystem takes.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping, Optional

from fluxfs.options import refuse_unknown_options


def merge_storage_options(where: str, storage_options: Optional[Mapping[str, Any]],
                          keywords: Mapping[str, Any]) -> dict[str, Any]:
    """`storage_options` and `keywords` as one dict of filesystem options for `where` (a class name)."""
    if storage_options is None:
        merged: dict[str, Any] = {}
    elif isinstance(storage_options, Mapping):
        merged = dict(storage_options)
    else:
        raise TypeError(f"{where}: storage_options must be a dict of filesystem options, "
                        f"not {type(storage_options).__name__}")
    clash = sorted(k for k, v in keywords.items() if k in merged and not _same(merged[k], v))
    if clash:
        raise TypeError(f"{where}: storage option(s) {', '.join(map(repr, clash))} given twice with different "
                        f"values, in storage_options= and as keyword arguments; give each once")
    # Keywords given to a pipes class are refused when no filesystem takes them (a misspelled `shufle=`
    # would be lost); a storage_options dict may be shared with other libraries, and FluxFileSystem
    # ignores what it does not know there, with a warning, as gcsfs does.
    refuse_unknown_options(keywords, where)
    merged.update(keywords)
    if "storage_options" in merged:
        raise TypeError(f"{where}: storage_options nested inside storage_options; give the options themselves")
    return merged


def split_keywords(kwargs: Mapping[str, Any], accepts: Callable[..., Any]) -> tuple[dict, dict]:
    """(arguments `accepts` names, the rest): a constructor's own arguments apart from storage options."""
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    own = {n for n, p in inspect.signature(accepts).parameters.items() if p.kind in named} - {"self", "cls"}
    mine = {k: v for k, v in kwargs.items() if k in own}
    return mine, {k: v for k, v in kwargs.items() if k not in own}


def _same(a: Any, b: Any) -> bool:
    try:
        return a is b or bool(a == b)
    except Exception:  # values that refuse comparison (arrays...) count as different
        return False
