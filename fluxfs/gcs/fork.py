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


# Objects whose state a child cannot take over unless it is let go first (gRPC channels): `_before_fork()` runs
# in the forking process just before fork, `_after_fork_in_parent()` right after, in the parent.
_PREPARE: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()


def prepare_fork(obj: Any) -> None:
    """Call `obj._before_fork()` before every fork while `obj` is alive (and `_after_fork_in_parent()` after)."""
    _PREPARE[id(obj)] = obj


def _before() -> None:
    for obj in list(_PREPARE.values()):
        obj._before_fork()


def _after_in_parent() -> None:
    for obj in list(_PREPARE.values()):
        obj._after_fork_in_parent()


os.register_at_fork(before=_before, after_in_parent=_after_in_parent, after_in_child=_after_fork_in_child)
