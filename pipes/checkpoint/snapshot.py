"""`snapshot`: a CPU copy of a state dict taken now, so a background save is unaffected by training going on."""
from __future__ import annotations

import copy
from typing import Any

import torch

__all__ = ["snapshot"]


def snapshot(obj: Any) -> Any:
    """A deep copy of `obj` whose tensors are fresh CPU clones, so training may mutate the originals.

    Containers keep their types (an OrderedDict state dict keeps its `_metadata`); a tensor
    reachable twice is copied once, so tied weights stay tied.
    """
    memo: dict[int, Any] = {}
    return _snapshot(obj, memo)


def _snapshot(obj: Any, memo: dict[int, Any]) -> Any:
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, torch.Tensor):
        clone = obj.detach().to("cpu", copy=True)
        if isinstance(obj, torch.nn.Parameter):
            clone = torch.nn.Parameter(clone, requires_grad=obj.requires_grad)
        memo[id(obj)] = clone
        return clone
    if isinstance(obj, dict):
        # copy.copy keeps the dict's class and instance attributes (e.g. state_dict()._metadata).
        new = copy.copy(obj)
        memo[id(obj)] = new
        for key, value in obj.items():
            new[key] = _snapshot(value, memo)
        return new
    if isinstance(obj, list):
        new_list = copy.copy(obj)
        memo[id(obj)] = new_list
        new_list[:] = [_snapshot(v, memo) for v in obj]
        return new_list
    if isinstance(obj, tuple):
        items = [_snapshot(v, memo) for v in obj]
        result = type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
        memo[id(obj)] = result
        return result
    # Other leaves (numbers, strings, numpy arrays, custom objects): deepcopy shares our memo,
    # so tensors already cloned above are reused rather than copied again.
    return copy.deepcopy(obj, memo)
