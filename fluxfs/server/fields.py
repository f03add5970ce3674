"""GCS ``fields=`` partial responses, e.g. ``items(name,size,generation),nextPageToken`` or ``items/name``."""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Dict, Optional, Tuple

from .errors import ServerError

Tree = Optional[Dict[str, Any]]  # None = keep the whole value


@lru_cache(maxsize=256)
def parse_fields(spec: str) -> Dict[str, Any]:
    """Parse a fields selector into a tree {name: subtree or None}."""
    tree, pos = _parse_list(spec.replace(" ", ""), 0)
    if pos != len(spec.replace(" ", "")):
        raise ServerError(400, f"Invalid field selection {spec!r}", "invalidParameter")
    return tree


def _parse_list(s: str, pos: int) -> Tuple[Dict[str, Any], int]:
    """A comma-separated list of items: `a,b(c,d),e/f`."""
    tree: Dict[str, Any] = {}
    while True:
        item, pos = _parse_item(s, pos)
        for name, sub in item.items():
            _merge(tree, name, sub)
        if pos < len(s) and s[pos] == ",":
            pos += 1
            continue
        return tree, pos


def _parse_item(s: str, pos: int) -> Tuple[Dict[str, Any], int]:
    """One item: a name, then `/item` (one nested level) or `(list)` or nothing."""
    start = pos
    while pos < len(s) and s[pos] not in ",()/":
        pos += 1
    name = s[start:pos]
    if not name:
        raise ServerError(400, f"Invalid field selection {s!r}", "invalidParameter")
    sub: Tree = None
    if pos < len(s) and s[pos] == "/":
        sub, pos = _parse_item(s, pos + 1)  # a/b/c: one nested level per '/'
    elif pos < len(s) and s[pos] == "(":
        sub, pos = _parse_list(s, pos + 1)
        if pos >= len(s) or s[pos] != ")":
            raise ServerError(400, f"Invalid field selection {s!r}", "invalidParameter")
        pos += 1
    return {name: sub}, pos


def _merge(tree: Dict[str, Any], name: str, sub: Tree) -> None:
    if name in tree:
        old = tree[name]
        if old is None or sub is None:
            tree[name] = None
        else:
            for k, v in sub.items():
                _merge(old, k, v)
    else:
        tree[name] = sub


def apply_fields(value: Any, tree: Tree) -> Any:
    """Keep only the selected parts of a JSON value (lists are filtered element-wise)."""
    if tree is None:
        return value
    if isinstance(value, list):
        return [apply_fields(v, tree) for v in value]
    if isinstance(value, dict):
        return {k: apply_fields(value[k], sub) for k, sub in tree.items() if k in value}
    return value
