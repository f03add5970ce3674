"""Which DCP items the coordinator marks shared (pure): only within a group whose members are all in the load."""
from __future__ import annotations

from torch.distributed.checkpoint.planner import LoadPlan

from fluxfs.pipes.checkpoint.dcp_shared import KEY, cut_windows, mark_shared, shared_windows, with_info

A, B, C = ("__0_0.distcp", 0, 100), ("__0_0.distcp", 100, 50), ("__1_0.distcp", 0, 70)


def plan(spans, members, rank, host="h0", node_only=False):
    info = {"members": members, "rank": rank, "host": host, "node_only": node_only}
    return with_info(LoadPlan(list(spans)), info)


def marked(plans, window=1000):
    return [shared_windows(p) for p in mark_shared(plans, lambda item: item, window)]


def test_items_every_member_reads_are_shared_the_same_on_every_member():
    got = marked([plan([A, B, C], (0, 1), 0), plan([B, A], (0, 1), 1)])
    assert got == [[[A, B]], [[A, B]]]  # C only rank 0 reads: its own


def test_nothing_shared_unless_every_member_is_in_the_load():
    # DCP over a subgroup {0, 1} of a 4-rank world whose reader shares over the world: members missing.
    assert marked([plan([A], (0, 1, 2, 3), 0), plan([A], (0, 1, 2, 3), 1)]) == [[], []]
    # A rank that resolved no group (info None) leaves its group incomplete.
    assert marked([plan([A], (0, 1), 0), LoadPlan([A])]) == [[], []]


def test_node_shares_on_one_host_only_explicit_groups_per_node():
    two_hosts = [plan([A], (0, 1), 0, "h0", True), plan([A], (0, 1), 1, "h1", True)]
    assert marked(two_hosts) == [[], []]
    per_node = [plan([A], (0, 1), 0, "h0"), plan([A], (0, 1), 1, "h0"),
                plan([A, C], (2, 3), 2, "h1"), plan([C, A], (2, 3), 3, "h1")]
    assert marked(per_node) == [[[A]], [[A]], [[A, C]], [[A, C]]]


def test_plans_without_sharing_carry_no_storage_data_of_ours():
    out = mark_shared([plan([A], (0, 1), 0), plan([B], (0, 1), 1)], lambda item: item, 1000)
    assert [p.storage_data for p in out] == [None, None]
    assert KEY == "fluxfs_share"


def test_windows_hold_about_window_bytes_a_bigger_span_alone():
    assert cut_windows([A, B, C], 120) == [[A], [B, C]]
    assert cut_windows([A, B, C], 60) == [[A], [B], [C]]
