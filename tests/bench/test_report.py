"""`python -m bench.report` renders every scenario with the peer columns (shards and weights included)."""
from __future__ import annotations

from bench.report import PEERS, sources, table


def med(**values) -> dict:
    return {"median": values}


def cells(md: str, label: str, unit: str) -> dict:
    """{column: cell} of the row for `label` and `unit`."""
    head = [c.strip() for c in md.splitlines()[0].strip("|").split("|")]
    for line in md.splitlines()[2:]:
        row = [c.strip() for c in line.strip("|").split("|")]
        if row[0].startswith(label) and row[1] == unit:
            return dict(zip(head, row))
    raise AssertionError(f"no row {label!r} {unit!r} in:\n{md}")


def test_weights_row_shows_every_peer_and_gcsfs_best_variant():
    report = {"scenario": "weights", "profile": "cloud", "params": {"size": 2 * 10**9},
              "contenders": {"fluxfs": med(load_mb_per_s=558, save_mb_per_s=304, cpu_s_per_gb=1.7, peak_mb=1900),
                             "gcsfs-cat": med(load_mb_per_s=81, save_mb_per_s=46),
                             "gcsfs-disk": med(load_mb_per_s=353),
                             "obstore": med(load_mb_per_s=500, cpu_s_per_gb=2.0, peak_mb=2000),
                             "tensorstore": {"skipped": "tensorstore is not installed"},
                             "runai": {"error": "RuntimeError: boom"}},
              "ratios": {"load:fluxfs/obstore": 1.12, "cpu:fluxfs/obstore": 0.85}}
    md = table([report])
    load = cells(md, "weights 2000 MB", "MB/s load")
    assert (load["fluxfs"], load["gcsfs"], load["obstore"], load["tensorstore"], load["runai"]) == (
        "558", "353", "500", "skipped", "error")
    assert "fluxfs/obstore 1.12x" in load["ratios (median of runs)"]
    assert cells(md, "weights 2000 MB", "MB/s save")["gcsfs"] == "46.0"
    cpu = cells(md, "weights 2000 MB", "CPU s/GB")
    assert (cpu["fluxfs"], cpu["obstore"], cpu["ratios (median of runs)"]) == ("1.7", "2.0", "fluxfs/obstore 0.85x")
    assert cells(md, "weights 2000 MB", "peak MiB")["obstore"] == "2,000"


def test_shards_and_packing_rows_are_rendered():
    report = {"scenario": "shards", "profile": "cloud", "sets": {
        "training": {"contenders": {"fluxfs-shards": med(samples_per_s=3601), "webdataset": med(samples_per_s=448)},
                     "ratios": {"fluxfs-shards/webdataset": 8.04}},
        "pack": {"contenders": {"pack": med(objects_per_s=2537), "gcsfs-cat": med(objects_per_s=1604)}, "ratios": {}}}}
    md = table([report])
    row = cells(md, "shards training", "samples/s")
    assert (row["fluxfs"], row["webdataset"]) == ("3,601", "448")
    row = cells(md, "shards pack", "obj/s")
    assert (row["fluxfs"], row["gcsfs"]) == ("2,537", "1,604")
    assert {"obstore", "tensorstore", "runai", "aiohttp"} <= set(PEERS)


def test_reads_rows_show_the_aiohttp_peer_cpu_per_object_and_the_run_it_came_from():
    report = {"scenario": "reads", "profile": "cloud", "commit": "abc1234", "date": "2026-12-07T22:00:17Z",
              "machine": {"cpus": 2, "cpu": "Xeon", "python": "3.11.7", "torch": "2.13.0"},
              "sets": {"2000x1MiB": {
                  "contenders": {"fluxfs": med(objects_per_s=1303, cpu_s_per_gb=0.8, peak_mb=180, cpu_s=1.6,
                                               bytes=2 * 10**9, objects=2000),
                                 "aiohttp": med(objects_per_s=1200, cpu_s=1.0, bytes=2 * 10**9, objects=2000)},
                  "ratios": {"fluxfs/aiohttp": 1.09, "cpu:fluxfs/aiohttp": 1.6}}}}
    md = table([report])
    row = cells(md, "reads 2000x1MiB", "obj/s")
    assert (row["fluxfs"], row["aiohttp"], row["ratios (median of runs)"]) == ("1,303", "1,200", "fluxfs/aiohttp 1.09x")
    cpu = cells(md, "reads 2000x1MiB", "CPU s/GB")  # aiohttp's derived from cpu_s and bytes
    assert (cpu["fluxfs"], cpu["aiohttp"], cpu["ratios (median of runs)"]) == ("0.8", "0.5", "fluxfs/aiohttp 1.6x")
    per_object = cells(md, "reads 2000x1MiB", "CPU us/object")
    assert (per_object["fluxfs"], per_object["aiohttp"], per_object["ratios (median of runs)"]) == ("800", "500", "")
    assert sources([report], ["reads-cloud.json"]) == (
        "- `reads-cloud.json`: reads (cloud), commit abc1234, 2026-12-07T22:00:17Z, 2 CPUs (Xeon), Python 3.11.7, "
        "torch 2.13.0")
