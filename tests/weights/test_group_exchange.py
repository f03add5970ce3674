"""How a group load's ranks move their shares (`pipes.distributed.broadcast.share`), over real gloo ranks.

Bytes exact on every rank (pieces sent straight from the tensors and small ones packed), each chunk sent
as soon as it is read rather than in turn, and a failed read neither hangs the others nor goes unreported.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pipes.test_distributed import free_port

ROOT = Path(__file__).resolve().parents[2]


MODES = "exact,broadcast,late,fail,subgroup"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    """Three gloo ranks' reports of each mode of the child (one process group for all: torch starts once)."""
    out = tmp_path_factory.mktemp("exchange")
    proc = subprocess.run([sys.executable, "-m", "tests.weights._exchange_child", MODES, "3", str(out),
                           str(free_port())], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(3)]


@pytest.mark.parametrize("mode", ["exact", "broadcast"])
def test_every_rank_holds_every_share_byte_for_byte(ranks, mode):
    for r, report in enumerate(ranks):
        assert report[mode]["error"] is None, r
        assert report[mode]["exact"] == {"0": True, "1": True, "2": True}, r


def test_a_group_of_some_ranks_exchanges_among_them(ranks):
    assert "subgroup" not in ranks[0]
    for report in ranks[1:]:
        assert report["subgroup"] == {"error": None, "exact": {"0": True, "1": True}}


def test_a_chunk_read_late_holds_back_none_of_the_others(ranks):
    # Rank 0's first chunk became ready only after rank 1 held its later chunks (not after 20 s).
    assert ranks[0]["late"]["others_arrived_first"] is True
    for report in ranks:
        assert report["late"]["exact"] == {"0": True, "1": True, "2": True}


def test_a_failed_read_is_returned_and_the_other_ranks_still_finish(ranks):
    got = [r["fail"] for r in ranks]
    assert got[1]["error"] == "RuntimeError: chunk 2 of rank 1 could not be read"
    for r in (0, 2):
        assert got[r]["error"] is None
        assert got[r]["exact"]["0"] is True and got[r]["exact"]["2"] is True  # the shares of the ranks that read
        assert got[r]["exact"]["1"] is False  # rank 1's failed chunk went out as it was (the caller raises)
