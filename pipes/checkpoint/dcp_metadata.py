"""Reading a DCP checkpoint's ``.metadata`` without running code from it.

``.metadata`` is a pickle, and unpickling runs whatever callables it names: anyone who can write to the
bucket could run code on every loading rank. Only the types a DCP checkpoint's metadata is made of may be
named here (as ``weights_only`` does for ``torch.load``); anything else is refused before it is called.
"""
from __future__ import annotations

import inspect
import pathlib
import pickle
from collections import OrderedDict
from functools import lru_cache
from typing import IO, Any

import torch
import torch.distributed.checkpoint.metadata as dcp_metadata

from ..torch_adapter import StorageInfo, layout_rebuilder
from .errors import UnsafeCheckpointError

__all__ = ["load_metadata"]


@lru_cache(maxsize=1)
def _allowed() -> dict[tuple[str, str], Any]:
    """(module, name) -> object, for every global a DCP ``.metadata`` may name."""
    ok: list[Any] = [StorageInfo, torch.Size, torch.device, layout_rebuilder(),
                     OrderedDict, set, frozenset, complex, slice, range, bytearray,
                     pathlib.PosixPath, pathlib.PurePosixPath, pathlib.WindowsPath, pathlib.PureWindowsPath]
    # Every dataclass and enum torch defines for checkpoint metadata (Metadata, TensorStorageMetadata, ...).
    ok += [obj for _, obj in inspect.getmembers(dcp_metadata, inspect.isclass)
           if obj.__module__ == dcp_metadata.__name__]
    table = {(obj.__module__, obj.__qualname__): obj for obj in ok}
    # dtypes pickle as ("torch", "float32"), layouts as ("torch", "strided").
    for name in dir(torch):
        value = getattr(torch, name, None)
        if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
            table[("torch", name)] = value
    return table


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes], path: str):
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        obj = _allowed().get((module, name))
        if obj is None:
            obj = _user_allowed(module, name)
        if obj is None:
            raise UnsafeCheckpointError(
                f"refusing to load {self.path}: it names {module}.{name}, which is not a type of DCP checkpoint "
                "metadata (a pickle naming other callables can run code on this machine). If you trust everyone "
                "who can write to this location, load with FluxStorageReader(..., trust_metadata=True), or allow "
                f"the type with torch.serialization.add_safe_globals([{module}.{name}])")
        return obj


def _user_allowed(module: str, name: str) -> Any:
    """A global the user allowed for torch.load's weights_only (``torch.serialization.add_safe_globals``)."""
    for entry in torch.serialization.get_safe_globals():
        obj, qualname = entry if isinstance(entry, tuple) else (entry, None)
        if (getattr(obj, "__module__", None), qualname or getattr(obj, "__qualname__", None)) == (module, name):
            return obj
    return None


def load_metadata(file: IO[bytes], path: str, *, trusted: bool = False) -> Any:
    """The unpickled ``.metadata`` read from ``file``; ``trusted=True`` unpickles it unrestricted."""
    if trusted:
        return pickle.load(file)
    try:
        return _MetadataUnpickler(file, path).load()
    except UnsafeCheckpointError:
        raise
    except (pickle.UnpicklingError, EOFError, TypeError, ValueError, AttributeError) as exc:
        raise UnsafeCheckpointError(f"cannot load {path}: not DCP checkpoint metadata "
                                    f"({type(exc).__name__}: {exc})") from exc

