"""torch.distributed.checkpoint's single-process warning, kept quiet where this process is alone by how it was
started.

`dcp.save` and `dcp.load` warn "torch.distributed is disabled, unavailable or uninitialized, assuming the
intent is to save in a single process" on every call made without a process group, even with no_dist=True:
noise in a script or notebook that saves alone on purpose. A process a launcher started as one of several
(torchrun's WORLD_SIZE, SLURM_NTASKS, Open MPI's OMPI_COMM_WORLD_SIZE, MPICH's PMI_SIZE above 1) keeps it:
there a missing `init_process_group` is a mistake (every rank would write the whole checkpoint) it names.
"""
from __future__ import annotations

import os
import warnings

_MESSAGE = (r"torch\.distributed is disabled, unavailable or uninitialized, assuming the intent is to "
            r"(save|load) in a single process")
_MODULE = r"torch\.distributed\.checkpoint\."  # the warning is attributed to dcp.save's / dcp.load's wrapper there
_LAUNCHER_SIZES = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def launched_as_one_of_several() -> bool:
    """Whether a launcher's environment says this process is one of several."""
    for name in _LAUNCHER_SIZES:
        try:
            if int(os.environ.get(name, "1")) > 1:
                return True
        except ValueError:
            continue
    return False


def quiet_single_process_warning() -> None:
    """Ignore DCP's single-process warning in this process, unless a launcher started several; added again
    when something (`warnings.catch_warnings`, a test runner) has put the filters back since."""
    if launched_as_one_of_several():
        return
    if not any(f[0] == "ignore" and getattr(f[3], "pattern", None) == _MODULE and getattr(f[1], "pattern", None)
               == _MESSAGE for f in warnings.filters):
        # Only DCP's own UserWarning of that text: another module's warnings, or DCP's others, still show.
        warnings.filterwarnings("ignore", message=_MESSAGE, category=UserWarning, module=_MODULE)
