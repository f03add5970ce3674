"""fluxfs.pipes.distributed: storage read once per torch.distributed group, shared through its collectives.

`plan` deals bytes to ranks (pure), `group` checks a `group=` argument and runs rank 0's answer or error
on every rank (and compares what each rank asked for: `requests` words the differences), `broadcast`
moves each owner's bytes to the others (`exchange`: point-to-point straight between the tensors on CPU
groups; broadcasts of flat buffers on NCCL), `listing` lists a dataset once per job. Used by
`load_model_dir(..., group=)`, `load_file(..., group=)` and the datasets.
"""
from __future__ import annotations

from .group import NO_GROUP

__all__ = ["NO_GROUP"]  # `group=NO_GROUP`: read from storage on every rank; the rest is imported from its module
