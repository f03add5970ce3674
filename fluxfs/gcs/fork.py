"""One fork hook for everything that holds per-process state (event loop, sessions, job ids, gRPC channels).

A forked child (a DataLoader worker) inherits the parent's objects but not its threads or
sockets; objects registered here get their `_after_fork()` called in the child, once, instead
of comparing `os.getpid()` on every use. Objects whose state a child cannot take over unless it is
let go first (gRPC channels) also get `_before_fork()` in the forking process just before fork and
`_after_fork_in_parent()` right after, in the parent.
"""
from __future__ import annotations

import functools
import os
import weakref
from typing import Any

# One registry, keyed by (method to call, id of the object): filesystems hash by their fsspec token, which exists
# only after __init__. An object's entries go when it does.
_HOOKED: "weakref.WeakValueDictionary[tuple[str, int], Any]" = weakref.WeakValueDictionary()


def reset_in_child(obj: Any) -> None:
    """Call `obj._after_fork()` in every child forked while `obj` is alive."""
    _HOOKED["_after_fork", id(obj)] = obj


def prepare_fork(obj: Any) -> None:
    """Call `obj._before_fork()` before every fork while `obj` is alive (and `_after_fork_in_parent()` after)."""
    _HOOKED["_before_fork", id(obj)] = obj
    _HOOKED["_after_fork_in_parent", id(obj)] = obj


def _call(method: str) -> None:
    """`method` of every object registered for it, in the order they were registered."""
    for (name, _), obj in list(_HOOKED.items()):
        if name == method:
            getattr(obj, method)()


os.register_at_fork(before=functools.partial(_call, "_before_fork"),
                    after_in_parent=functools.partial(_call, "_after_fork_in_parent"),
                    after_in_child=functools.partial(_call, "_after_fork"))
