"""A dataset's object list resolved once per job: rank 0 lists (or reads the manifest), the others receive it.

On by default when torch.distributed is initialised with more than one rank and the dataset is being
built in a rank's main process (a DataLoader worker never runs a collective: it lists itself, as
before). Every rank must then build its datasets in the same order; `list_once=False` opts out.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, TypeVar

import torch
import torch.utils.data

from .group import Group

T = TypeVar("T")


def check_list_once(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{where}: list_once must be True or False, not {type(value).__name__} {value!r}")
    return value


def in_job() -> bool:
    """Whether this is a rank's main process (main thread) in an initialised group of more than one process."""
    if not torch.distributed.is_available() or torch.utils.data.get_worker_info() is not None:
        return False
    if threading.current_thread() is not threading.main_thread():  # a collective's order is the main thread's
        return False
    import torch.distributed as dist

    return dist.is_initialized() and dist.get_world_size() > 1


def list_once(compute: Callable[[], T], what: str, enabled: bool = True) -> T:
    """`compute()` on rank 0 of the default group and its answer (or error) on every rank, when `enabled`
    and `in_job()`; else `compute()` here. `what` names the dataset: a rank building another one at that
    point (datasets built in a different order) gets a ValueError naming both."""
    if not enabled or not in_job():
        return compute()
    source, value = Group(None, what).first(lambda: (what, compute()))
    if source != what:
        raise ValueError(f"{what}: rank 0 was listing {source} at this point; with list_once (the default "
                         "under torch.distributed) every rank must build its datasets in the same order, "
                         "or pass list_once=False")
    return value
