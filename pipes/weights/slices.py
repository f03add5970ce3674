"""Which bytes of a row-major tensor an index (`t[a:b, :, 3]`) selects, as runs of contiguous bytes.

A slice reads only these runs: a tensor-parallel rank's rows of a weight are one run, its columns
one run per row (runs closer than a request's worth are fetched together, the bytes between dropped).
"""
from __future__ import annotations

import itertools
import math
from typing import Any

from .header import SafetensorsError


def normalize(index: Any, shape: tuple, where: str) -> list:
    """One entry per dimension: an int (the dimension is dropped) or a range (kept); IndexError if out of bounds."""
    items = list(index) if isinstance(index, tuple) else [index]
    if sum(i is Ellipsis for i in items) > 1:
        raise IndexError(f"{where}: an index can only have a single ellipsis")
    if Ellipsis in items:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (len(shape) - len(items) + 1)
    if len(items) > len(shape):
        raise IndexError(f"{where}: too many indices ({len(items)}) for a tensor of {len(shape)} dimensions")
    items += [slice(None)] * (len(shape) - len(items))
    out: list = []
    for dim, (it, n) in enumerate(zip(items, shape)):
        if isinstance(it, slice):
            r = range(*it.indices(n))
            if r.step <= 0:
                raise SafetensorsError(f"{where}: slice steps must be positive (dimension {dim}: {it})")
            out.append(r)
        elif isinstance(it, int) or hasattr(it, "__index__"):
            i = it.__index__()
            if not -n <= i < n:
                raise IndexError(f"{where}: index {i} is out of bounds for dimension {dim} of size {n}")
            out.append(i % n)
        else:
            raise SafetensorsError(f"{where}: unsupported index {it!r} (ints, slices and ... only)")
    return out


def runs(shape: tuple, itemsize: int, index: list) -> tuple[tuple, list[tuple[int, int]]]:
    """(the result's shape, [(byte offset in the tensor, length)] in the result's order) for a normalized index."""
    out_shape = tuple(len(i) for i in index if isinstance(i, range))
    if math.prod(out_shape) == 0:
        return out_shape, []
    strides = [itemsize * math.prod(shape[d + 1:]) for d in range(len(shape))]
    # The innermost dimensions taken whole are one block; the last partial one with step 1 joins it.
    k = len(shape)
    while k > 0 and isinstance(index[k - 1], range) and index[k - 1] == range(shape[k - 1]):
        k -= 1
    if k == 0:
        return out_shape, [(0, itemsize * math.prod(shape))]
    last = index[k - 1]
    if isinstance(last, range) and last.step == 1:
        block = len(last) * strides[k - 1]
        outer, first = index[:k - 1], [last.start]
    else:
        block = strides[k - 1]
        outer, first = index[:k - 1], (last if isinstance(last, range) else [last])
    axes = [([i] if isinstance(i, int) else i) for i in outer] + [first]
    out = []
    for pos in itertools.product(*axes):
        out.append((sum(p * strides[d] for d, p in enumerate(pos)), block))
    return out_shape, out
