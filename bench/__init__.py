"""fluxfs benchmarks: every scenario runs fluxfs and the alternatives side by side.

The rules every scenario follows (enforced by `bench.common`): all contenders run in one
process run, on the same server and the same data, interleaved (A B C A B C ...); the figure
quoted is the median of the repeats, with min and max kept; client CPU seconds are reported
beside wall time; a contender that returns wrong data is reported as failed, not timed. The peer
clients (obstore, TensorStore, Run:ai Model Streamer: the `peers` extra) each run in their own
process with the same concurrency as fluxfs; one that is not installed is reported as skipped.
"""
