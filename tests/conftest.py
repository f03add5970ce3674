"""Shared fixtures: the fluxfs server and fake-gcs-server on 127.0.0.1, fresh buckets, filesystems.

`gcs_server` is parametrized over both servers; use it for behaviour both implement
correctly, and `flux_server` for the rest: fake-gcs-server ignores generation preconditions,
`fields` (partial responses) and the 1000-item page cap, repeats prefixes on every list page,
sets no componentCount on composites and has no XML multipart upload or moveTo.
"""
from __future__ import annotations

import contextlib
import signal
import subprocess
import time
import uuid

import pytest

from fluxfs import FluxFileSystem
from tests.fake_gcs import fake_gcs_server


# Left out of `make test-quick` (pytest -m "not slow"), kept in `make test`: whole files or single tests, by
# node-id prefix, that take seconds each (subprocesses, fresh venvs, gloo process groups, spawned DataLoader
# workers, the notebook, the demo, stalls waited out). Listed here for the areas whose files carry no marks;
# elsewhere a test says `@pytest.mark.slow` itself. tests/test_slow_marks.py checks every entry still names a test.
SLOW = (
    "tests/badinput/test_interrupt_sync_methods.py::test_ctrl_c_during_recursive_rm_stops_deleting",
    "tests/badinput/test_stalls.py",
    "tests/badinput/test_temp_ownership.py::test_another_clients_upload_survives_cleanup_and_completes",
    "tests/badinput/test_temp_ownership.py::test_cleanup_of_a_prefix_keeps_the_records_of_uploads_outside_it",
    "tests/badinput/test_temp_ownership.py::test_python_api_aborts_only_fluxfs_uploads_unless_told",
    "tests/badinput/test_temp_prefix.py::test_leftover_temporary_is_hidden_and_cleaned",
    "tests/cache/test_cold_start.py",
    "tests/cache/test_fs.py::test_two_processes_download_an_entry_once",
    "tests/cache/test_objects.py::test_a_filler_killed_mid_pack_leaves_nothing_complete_and_the_next_run_reuses_the_rest",
    "tests/cache/test_objects.py::test_two_processes_filling_the_same_objects_write_each_once",
    "tests/cache/test_range_fill.py::test_a_process_exiting_right_after_its_reads_completes_its_fill",
    "tests/cache/test_range_fill.py::test_a_range_filler_killed_mid_fill_leaves_nothing_complete_and_the_next_one_fills",
    "tests/cache/test_shards.py::test_two_workers_download_each_shard_once",
    "tests/cache/test_store.py::test_a_filler_killed_mid_fill_leaves_nothing_complete_and_the_next_one_fills",
    "tests/cache/test_store.py::test_processes_sharing_a_cache_below_their_working_set",
    "tests/cache/test_trust.py::test_a_pack_held_by_a_stopped_process_is_read_from_storage",
    "tests/cache/test_trust.py::test_a_reader_never_waits_without_bound_for_a_stopped_filler",
    "tests/cache/test_trust.py::test_two_processes_starting_together_download_an_entry_once",
    "tests/cli/test_demo.py",
    "tests/cli/test_interrupt.py",
    "tests/pipes/test_datasets.py::test_elastic_resume_reads_every_remaining_object_once",
    "tests/pipes/test_datasets.py::test_iterable_resume_at_many_positions_yields_exactly_the_rest",
    "tests/pipes/test_datasets.py::test_map_dataset_dataloader_reads_every_object_once",
    "tests/pipes/test_datasets.py::test_set_epoch_reaches_persistent_workers",
    "tests/pipes/test_ddp.py::test_ddp_over_objects_takes_the_same_steps_on_every_rank_each_epoch",
    "tests/pipes/test_ddp.py::test_ddp_over_uneven_shards_takes_the_same_steps_on_every_rank_each_epoch",
    "tests/pipes/test_ddp.py::test_map_sampler_gives_each_rank_its_disjoint_equal_share_and_reads_only_it",
    "tests/pipes/test_distributed.py",
    "tests/pipes/test_handle.py::test_read_objects_in_forked_and_spawned_workers_builds_a_filesystem_per_worker",
    "tests/pipes/test_nodes.py::test_pipeline_resumes_where_it_stopped",
    "tests/pipes/test_readahead.py::test_another_sampler_reads_as_before",
    "tests/pipes/test_readahead.py::test_read_ahead_off_and_spawned_workers",
    "tests/pipes/test_readahead.py::test_sampler_order_is_fixed_by_seed_and_epoch",
    "tests/reads/test_batched.py::test_injected_faults_on_compose_get_and_delete",
    "tests/reads/test_batched.py::test_keyboard_interrupt_during_cat_cleans_up",
    "tests/reads/test_batched.py::test_ten_thousand_tiny_objects",
    "tests/reads/test_stress.py",
    "tests/shards/test_dataset.py::test_elastic_resume_reads_every_remaining_sample_once",
    "tests/shards/test_dataset.py::test_every_sample_once_per_epoch_over_ranks_and_workers",
    "tests/shards/test_distributed.py",
    "tests/shards/test_parts.py",
    "tests/test_notebook.py",
    "tests/test_packaging.py",
    "tests/test_training_doc.py",
    "tests/test_without_torch.py",
    "tests/weights/test_group.py",
    "tests/weights/test_group_cache.py",
    "tests/weights/test_group_exchange.py",
    "tests/weights/test_model_dir.py::test_concurrent_loads_from_two_processes",
    "tests/zonal/server/test_root_appends.py",
    "tests/zonal/test_takeover.py::test_refused_and_taken_over_appends_leave_no_pending_task_at_exit",
)


# Marked `alone`: tests whose assertion is a wall-clock bound of about a second (Ctrl-C stops a command within
# a second). `make test` runs every other test in parallel workers (pytest-xdist), then these in one process,
# so that the bound is measured on a machine that is not running three other tests at the time.
ALONE = (
    "tests/badinput/test_interrupt_sync_methods.py",
    "tests/badinput/test_interrupts.py",
    "tests/cli/test_interrupt.py",
    "tests/gcs/test_bridge_cancel.py",
    "tests/pipes/test_interrupted_epoch.py",
    "tests/reads/test_batched.py::test_keyboard_interrupt_during_cat_cleans_up",
)


def is_listed(nodeid: str, entries: tuple[str, ...] = SLOW) -> bool:
    """`nodeid` is one of `entries`, or inside one (a file's tests, a test's parameter sets)."""
    return any(nodeid == entry or nodeid.startswith((entry + "::", entry + "[")) for entry in entries)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if is_listed(item.nodeid, SLOW):
            item.add_marker(pytest.mark.slow)
        if is_listed(item.nodeid, ALONE):
            item.add_marker(pytest.mark.alone)


def pytest_configure(config):
    # A job started in the background by a non-interactive shell (as CI may run us) inherits
    # SIGINT ignored, and then Python never raises KeyboardInterrupt: the Ctrl-C tests need the
    # interactive default that users have.
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL):
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def flux_server():
    """The embedded fluxfs server, in-process, local profile."""
    from fluxfs.server import run

    with run() as srv:
        yield srv


@pytest.fixture(autouse=True)
def _local_profile_after_test(request):
    """Whatever a test configured (faults, latency, deny_ops, tokens), the next test starts clean."""
    yield
    if "flux_server" in request.fixturenames:
        request.getfixturevalue("flux_server").configure(profile="local")


@pytest.fixture(scope="session")
def fake_gcs():
    """fake-gcs-server, the independent implementation, memory backend."""
    with fake_gcs_server() as srv:
        yield srv


@pytest.fixture(params=["fluxfs-server", "fake-gcs-server"])
def gcs_server(request):
    """Each test using this runs once against each server."""
    name = "flux_server" if request.param == "fluxfs-server" else "fake_gcs"
    return request.getfixturevalue(name)


def new_bucket_name() -> str:
    return f"t{uuid.uuid4().hex[:16]}"


@pytest.fixture
def bucket(flux_server) -> str:
    """A fresh, empty bucket on the fluxfs server."""
    name = new_bucket_name()
    flux_server.create_bucket(name)
    return name


@pytest.fixture
def any_bucket(gcs_server) -> str:
    """A fresh, empty bucket on whichever server `gcs_server` is."""
    name = new_bucket_name()
    gcs_server.create_bucket(name)
    return name


def server_options(server, **options) -> dict:
    """Storage options for `server` (anonymous, not shared through fsspec's instance cache) plus `options`:
    what `make_fs` builds from, for the APIs that take storage options (fsspec.open, datasets, checkpoints)."""
    return {"endpoint_url": server.url, "token": "anon", "skip_instance_cache": True, **options}


def make_fs(server, **options) -> FluxFileSystem:
    """A FluxFileSystem for `server`, not shared through fsspec's instance cache."""
    return FluxFileSystem(**server_options(server, **options))


@pytest.fixture
def storage_options(flux_server) -> dict:
    """`server_options` of the fluxfs server (an area's conftest may add to them, e.g. a quicker retry)."""
    return server_options(flux_server)


def reap(proc: subprocess.Popen) -> None:
    """A test's child process ended on every path: killed if still running, waited for, its pipes closed."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def wait_for(check, what: str, timeout: float = 60.0, every: float = 0.01):
    """Poll `check()` until it returns something true and return that: a test waits for the event it needs
    (a file appearing, a server counter, a process state), never a fixed time. AssertionError naming `what`
    if it has not happened within `timeout` seconds (a bound for a loaded machine, not an expected time)."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(every)


@pytest.fixture
def fs(flux_server) -> FluxFileSystem:
    return make_fs(flux_server)


@pytest.fixture
def any_fs(gcs_server) -> FluxFileSystem:
    return make_fs(gcs_server)


@contextlib.contextmanager
def mounted_tmpfs(directory, size: str):
    """A tmpfs of `size` ("1m") mounted on the existing `directory`, a small disk to fill (needs root, as in
    CI's container); the test is skipped where mount is not allowed."""
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                      capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)


def edited(state: dict, **changes) -> dict:
    """A copy of a saved state with keys changed (`KeyError` as a value: that key removed), to forge one."""
    out = dict(state)
    for key, value in changes.items():
        if value is KeyError:
            del out[key]
        else:
            out[key] = value
    return out
