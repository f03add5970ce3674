"""Generation and metageneration preconditions, checked as GCS does (412, or 304 on reads)."""
from __future__ import annotations

from typing import Optional

from .errors import ServerError
from .objects import Obj


def check_preconditions(obj: Optional[Obj], if_gen: Optional[int] = None, if_gen_not: Optional[int] = None,
                        if_meta: Optional[int] = None, if_meta_not: Optional[int] = None,
                        read: bool = False) -> None:
    """Raise 412 (or 304 for failed NotMatch conditions on reads) as GCS does."""
    if if_gen is not None:
        if if_gen == 0:
            if obj is not None:
                raise ServerError(412, "At least one of the pre-conditions you specified did not hold "
                                       "(ifGenerationMatch=0: object already exists).")
        elif obj is None or obj.generation != if_gen:
            raise ServerError(412, "At least one of the pre-conditions you specified did not hold "
                                   f"(ifGenerationMatch={if_gen}).")
    if if_meta is not None and (obj is None or obj.metageneration != if_meta):
        raise ServerError(412, "At least one of the pre-conditions you specified did not hold "
                               f"(ifMetagenerationMatch={if_meta}).")
    if if_gen_not is not None and obj is not None and obj.generation == if_gen_not:
        raise ServerError(304 if read else 412, f"Precondition ifGenerationNotMatch={if_gen_not} did not hold.")
    if if_meta_not is not None and obj is not None and obj.metageneration == if_meta_not:
        raise ServerError(304 if read else 412, f"Precondition ifMetagenerationNotMatch={if_meta_not} did not hold.")
