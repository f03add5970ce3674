"""What each rank of a group asked for, compared (pure): the words of the error when ranks ask differently.

A collective load reads what rank 0 opened; a rank that asked for another URL, other tensors or another
generation would silently receive rank 0's bytes. Every rank's request (a dict of field -> value) is
gathered and compared field by field; a difference is named with the ranks on each side, e.g.
"ranks 1 and 3 asked for flux://b/step-200, ranks 0 and 2 for flux://b/step-100".
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

# A field whose value on some rank is this (e.g. tensors chosen by a function) is not compared here:
# the plan digest checks what it chose instead.
UNCOMPARED = "(a function)"


def ranks_phrase(ranks: Sequence[int]) -> str:
    """"rank 1", "ranks 1 and 3", "ranks 0, 2 and 5"; long runs of consecutive ranks as "ranks 0-63"."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    words: list[str] = []
    start = 0
    for i in range(1, len(ranks) + 1):
        if i < len(ranks) and ranks[i] == ranks[i - 1] + 1:
            continue
        run = ranks[start:i]
        words += [f"{run[0]}-{run[-1]}"] if len(run) >= 3 else [str(r) for r in run]
        start = i
    return "ranks " + (words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1])


def sides(values: Sequence[Any]) -> list[tuple[list[int], Any]]:
    """The distinct values of `values` (one per rank), each with the ranks that hold it, rank 0's side last."""
    groups: list[tuple[list[int], Any]] = []
    for r, v in enumerate(values):
        for ranks, seen in groups:
            if seen == v:
                ranks.append(r)
                break
        else:
            groups.append(([r], v))
    return groups[1:] + groups[:1]


def shorten(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def differences(requests: Sequence[dict[str, Any]], spell: Optional[dict[str, Callable[[Any], str]]] = None,
                loose: Sequence[str] = ()) -> list[str]:
    """One phrase per field the ranks' `requests` disagree on ("ranks 1 and 3 asked for X, rank 0 for Y");
    `spell[field]` renders a value, fields in `loose` are not compared."""
    spell = spell or {}
    out: list[str] = []
    for name in requests[0]:
        if name in loose:
            continue
        values = [req.get(name) for req in requests]
        if UNCOMPARED in values:
            continue
        split = sides(values)
        if len(split) < 2:
            continue
        show = spell.get(name, repr)
        said = [f"{ranks_phrase(ranks)} {'asked for' if i == 0 else 'for'} {shorten(show(v))}"
                for i, (ranks, v) in enumerate(split)]
        out.append(f"{name}: " + ", ".join(said))
    return out
