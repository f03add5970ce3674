"""One fork hook for everything that holds per-process state (event loop, sessions, job ids).

A forked child (a DataLoader worker) inherits the parent's objects but not its threads or
sockets; objects registered here get their `_after_fork()` called in the child, once, instead
of comparing `os.getpid()` on every use.
"""
from __future__ import annotations

import os
import weakref
from typing import Any

# Keyed by id: filesystems hash by their fsspec token, which exists only after __init__.
_LIVE: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()


def reset_in_child(obj: Any) -> None:
    """Call `obj._after_fork()` in every child forked while `obj` is alive."""
    _LIVE[id(obj)] = obj


def _after_fork_in_child() -> None:
    for obj in list(_LIVE.values()):
        obj._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
