"""A `group=` argument checked once, and the two small collectives every group load starts with.

`first(compute)`: rank 0 computes (reads an index, headers, a listing) and every rank gets its answer,
or raises its error: a failure on rank 0 never leaves the others waiting in a collective. `agree`: each
rank's plan digest and read error gathered, so every rank raises when any failed or their plans differ.
"""
from __future__ import annotations

import pickle
from typing import Any, Callable, Optional, TypeVar

import torch
import torch.utils.data

from .requests import differences, ranks_phrase, sides

T = TypeVar("T")


class _NoGroup:
    """The default of `group=`: each process loads alone (None is torch's default group, as in its own calls)."""

    def __repr__(self) -> str:
        return "NO_GROUP"


NO_GROUP: Any = _NoGroup()


def _dist():
    import torch.distributed as dist

    return dist


class Group:
    """A process group this process belongs to: its rank and size in it, and collectives on it."""

    def __init__(self, pg: Any, where: str):
        dist = _dist()
        self.pg, self.where = pg, where
        self.rank = dist.get_rank(pg)
        self.size = dist.get_world_size(pg)
        backend = str(dist.get_backend(pg)).lower()
        # A gloo (or mixed cpu:gloo,cuda:nccl) group moves CPU tensors; an NCCL-only group, CUDA ones.
        self.device = torch.device("cpu") if ("gloo" in backend or "mpi" in backend) else \
            torch.device("cuda", torch.cuda.current_device())

    def global_rank(self, rank: int) -> int:
        """The default group's rank of this group's `rank` (what broadcast's `src` takes)."""
        return _dist().get_global_rank(self.pg, rank) if self.pg is not None else rank

    def first(self, compute: Callable[[], T]) -> T:
        """`compute()` run on rank 0 only; its result (or its exception) on every rank."""
        box: list = [None]
        error: Optional[BaseException] = None
        if self.rank == 0:
            try:
                box[0] = ("ok", compute())
            except BaseException as exc:  # noqa: B902 - the others must learn it, then it is raised here
                error = exc
                box[0] = ("error", portable(exc))
        _dist().broadcast_object_list(box, src=self.global_rank(0), group=self.pg)
        if error is not None:
            raise error
        kind, value = box[0]
        if kind == "error":
            raise _from_rank(value, 0)
        return value

    def agree(self, digest: Any, error: Optional[BaseException], what: str) -> None:
        """Every rank's (digest, error) gathered: this rank's error raised, else another's, else a
        ValueError when the ranks' digests (what each asked for) differ."""
        got: list = [None] * self.size
        _dist().all_gather_object(got, (digest, portable(error) if error is not None else None), group=self.pg)
        if error is not None:
            raise error
        for r, (_, exc) in enumerate(got):
            if exc is not None:
                raise _from_rank(exc, r)
        split = sides([d for d, _ in got])
        if len(split) > 1:
            apart = [r for ranks, _ in split[:-1] for r in ranks]
            raise ValueError(f"{self.where}: the ranks of the group asked for different {what} "
                             f"({ranks_phrase(sorted(apart))} {'differs' if len(apart) == 1 else 'differ'} from "
                             f"{ranks_phrase(split[-1][0])}); every rank must make the same call")

    def agree_request(self, request: dict[str, Any], spell: Optional[dict[str, Callable[[Any], str]]] = None,
                      loose: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """Every rank's `request` (field -> value: what it asked for) gathered before anything is read; a
        ValueError on every rank naming each field the ranks disagree on and which ranks asked for what.
        Fields in `loose` (e.g. the endpoint) may differ; every rank's request is returned."""
        got: list = [None] * self.size
        _dist().all_gather_object(got, request, group=self.pg)
        found = differences(got, spell, loose)
        if found:
            raise ValueError(f"{self.where}: the ranks of the group asked for different things; "
                             + "; ".join(found) + ". Every rank of the group must make the same call (a rank "
                             "given another URL would otherwise receive rank 0's tensors)")
        return got


def portable(exc: BaseException) -> BaseException:
    """`exc` if it survives pickling, else a RuntimeError carrying its type and message."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # any unpicklable exception is replaced the same way
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _from_rank(exc: BaseException, rank: int) -> BaseException:
    exc.add_note(f"(raised on rank {rank} of the group)")
    return exc


def resolve_group(group: Any, where: str) -> Optional[Group]:
    """None for NO_GROUP or a group of one process; else the checked `Group` (None = the default group)."""
    if group is NO_GROUP:
        return None
    if not torch.distributed.is_available():
        raise RuntimeError(f"{where}: group= needs torch.distributed, which this torch build does not have")
    dist = _dist()
    if group is dist.GroupMember.NON_GROUP_MEMBER:  # what new_group() returns to the ranks it leaves out
        raise ValueError(f"{where}: this process (rank {dist.get_rank()} of the default group) is not a member "
                         "of the group= given")
    if group is not None and not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"{where}: group= takes a torch.distributed ProcessGroup (e.g. "
                        f"torch.distributed.group.WORLD), not {type(group).__name__} {group!r}")
    if not dist.is_initialized():
        raise RuntimeError(f"{where}: group={'None (the default group)' if group is None else 'a ProcessGroup'} "
                           "needs torch.distributed initialised: call torch.distributed.init_process_group() "
                           "first, or leave group= out to load alone")
    if torch.utils.data.get_worker_info() is not None:
        raise RuntimeError(f"{where}: group= cannot be used inside a DataLoader worker (collectives run only "
                           "in a rank's main process)")
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError(f"{where}: this process (rank {dist.get_rank()} of the default group) is not a member "
                         "of the group= given")
    found = Group(group, where)
    return found if found.size > 1 else None
