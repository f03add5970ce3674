"""`register_gs`: plain ``gs://`` URLs opened by fluxfs in third-party code that names them (an opt-in)."""
from __future__ import annotations


def register_gs(protocols: tuple[str, ...] = ("gs", "gcs")) -> None:
    """Make fsspec open ``gs://`` (and ``gcs://``) URLs with `FluxFileSystem`, in this process: for third-party
    code that names gs:// (pandas, datasets, webdataset's fsspec paths, ...). Opt-in, since it replaces gcsfs
    for those URLs; undo with ``fsspec.register_implementation("gs", "gcsfs.GCSFileSystem", clobber=True)``.
    A forked DataLoader worker inherits it; a spawned one calls it again (``worker_init_fn``)."""
    import fsspec

    from .core import FluxFileSystem

    for protocol in protocols:
        if protocol not in ("gs", "gcs"):
            raise ValueError(f"register_gs: FluxFileSystem opens gs:// and gcs:// URLs, not {protocol}://")
        fsspec.register_implementation(protocol, FluxFileSystem, clobber=True)
