"""`python -m bench.report`: the README's benchmark table and a ratio plot from bench/results/*.json.

Every figure comes from a JSON report written by a benchmark run; nothing is typed in by hand. Columns: fluxfs,
gcsfs, Dataflux, WebDataset, the peers (obstore, TensorStore, Run:ai Model Streamer, bare aiohttp) and the limit;
rows: each scenario's headline, client CPU per GB and per object, peak memory. Below the table, each report's
commit, UTC date and machine, so that a row can be cited with them.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Iterator

# The metric a row quotes, in order of preference, with its unit.
METRICS = (("samples_per_s", "samples/s"), ("objects_per_s", "obj/s"), ("save_mb_per_s", "MB/s save"),
           ("load_mb_per_s", "MB/s load"), ("pages_per_s", "pages/s"), ("gets_per_s", "GET/s"),
           ("mb_per_s", "MB/s"))
PEERS = ("gcsfs", "dataflux", "dataflux-best", "webdataset", "obstore", "tensorstore", "runai", "aiohttp",
         "limit")
# The contender a column shows, in order of preference: scenarios name their variants differently
# (shards: fluxfs-shards; packing: pack; weights: gcsfs-disk, gcsfs's best, and gcsfs-cat).
ALIASES = {"fluxfs": ("fluxfs", "fluxfs-shards", "pack"), "gcsfs": ("gcsfs", "gcsfs-disk", "gcsfs-cat")}
# Rows beside the headline: client CPU per GB and per object (lower is better) and peak memory above the start,
# each with the ratios whose key starts with its prefix (CPU ratios are per GB: shown on that row only).
EXTRA_ROWS = (("cpu_s_per_gb", "load_cpu_s_per_gb", "CPU s/GB", "cpu:"),
              ("cpu_us_per_object", "cpu_us_per_object", "CPU us/object", "cpu-per-object:"),
              ("peak_mb", "load_extra_rss_mb", "peak MiB", "rss:"))
EXTRA_PREFIXES = tuple(row[3] for row in EXTRA_ROWS)


def _size_label(params: dict) -> str:
    """" 1M objects" / " 2000 MB" from a report's params, so runs of one scenario at two sizes differ."""
    if not params:
        return ""
    if "bytes" in params or "size" in params and "objects" not in params:
        return f" {(params.get('bytes') or params.get('size')) / 1e6:.0f} MB"
    if "objects" in params:
        n = params["objects"]
        return f" {n // 1000}k objects" if n < 10**6 else f" {n / 1e6:g}M objects"
    return ""


def subreports(report: dict) -> Iterator[tuple[str, dict]]:
    """(label, report) for a report and for each of its sets or rank counts (scenarios that run several)."""
    if "sets" in report:
        for name, sub in report["sets"].items():
            yield f"{report['scenario']} {name}", {**sub, "profile": report.get("profile")}
    elif "ranks" in report:
        for n, sub in report["ranks"].items():
            label = f"{report['scenario']}{_size_label(sub.get('params'))} {n} rank{'s' if str(n) != '1' else ''}"
            yield label, {**sub, "profile": report.get("profile")}
    else:
        yield report["scenario"] + _size_label(report.get("params")), report


def with_derived(contenders: dict) -> dict:
    """Contenders whose medians also carry CPU per GB and per object, derived from cpu_s, bytes and objects as
    the harness derives them (`bench.common.measure`), for reports written before it did."""
    out = {}
    for name, c in contenders.items():
        med = dict(c.get("median", {}))
        if "cpu_s" in med and med.get("bytes") and "load_cpu_s_per_gb" not in med:  # weights: the load's own
            med.setdefault("cpu_s_per_gb", med["cpu_s"] / (med["bytes"] / 1e9))
        if "cpu_s" in med and med.get("objects"):
            med.setdefault("cpu_us_per_object", med["cpu_s"] / med["objects"] * 1e6)
        out[name] = {**c, "median": med} if "median" in c else c
    return out


def metrics_of(report: dict) -> list[tuple[str, str]]:
    medians = [c.get("median", {}) for c in report.get("contenders", {}).values()]
    return [(m, unit) for m, unit in METRICS if any(m in med for med in medians)]


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"


def pick(contenders: dict, column: str, metrics: tuple = ()) -> dict:
    """The contender shown in `column`: the first of its aliases with one of `metrics` ({} if none ran)."""
    present = [contenders[n] for n in ALIASES.get(column, (column,)) if n in contenders]
    for c in present:
        if not metrics or any(m in c.get("median", {}) for m in metrics):
            return c
    return present[0] if present else {}


def cell(c: dict, *metrics: str) -> str:
    if "error" in c:
        return "error"
    if "skipped" in c:
        return "skipped"
    med = c.get("median", {})
    return fmt(next((med[m] for m in metrics if m in med), None))


def table(reports: list[dict]) -> str:
    lines = ["| scenario (profile) | metric | fluxfs | " + " | ".join(PEERS) + " | ratios (median of runs) |",
             "|---|---|---|" + "---|" * len(PEERS) + "---|"]
    for report in reports:
        for label, sub in subreports(report):
            contenders = with_derived(sub.get("contenders", {}))
            if not pick(contenders, "fluxfs"):  # e.g. the server's own figures: not a comparison
                continue
            ratios = sub.get("ratios") or {}
            found = metrics_of(sub)
            # save and load are both headline metrics; elsewhere the first (most specific) one is.
            shown_metrics = [m for m in found if m[0] in ("save_mb_per_s", "load_mb_per_s")] or found[:1]
            rows = [((metric,), unit, metric.split("_")[0] + ":") for metric, unit in shown_metrics]
            medians = [c.get("median", {}) for c in contenders.values()]
            rows += [((m, alt), unit, prefix) for m, alt, unit, prefix in EXTRA_ROWS
                     if any(m in med or alt in med for med in medians)]
            for metrics, unit, prefix in rows:
                cells = [cell(pick(contenders, name, metrics), *metrics) for name in ("fluxfs",) + PEERS]
                extra = prefix in EXTRA_PREFIXES
                shown = {k: v for k, v in ratios.items()
                         if k.startswith(prefix) or (not extra and ":" not in k)}
                ratio_text = ", ".join(f"{k.split(':')[-1]} {v:g}x" for k, v in shown.items())
                lines.append(f"| {label} ({sub.get('profile')}) | {unit} | " + " | ".join(cells) + f" | {ratio_text} |")
    return "\n".join(lines)


def provenance(report: dict) -> str:
    """"commit abc1234, 2026-12-07T21:58:02Z, 2 CPUs (model), Python 3.11.7, torch 2.13.0" of one report."""
    machine = report.get("machine") or {}
    parts = [f"commit {report.get('commit') or 'not recorded'}", report.get("date") or "date not recorded"]
    if machine.get("cpus"):
        parts.append(f"{machine['cpus']} CPUs" + (f" ({machine['cpu']})" if machine.get("cpu") else ""))
    parts += [f"{k.capitalize() if k == 'python' else k} {machine[k]}" for k in ("python", "torch") if machine.get(k)]
    return ", ".join(parts)


def sources(reports: list[dict], names: list[str]) -> str:
    """One line per report file: its scenario, profile and `provenance`."""
    return "\n".join(f"- `{name}`: {r.get('scenario')} ({r.get('profile')}), {provenance(r)}"
                     for name, r in zip(names, reports))


def plot(reports: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, values = [], []
    for report in reports:
        for label, sub in subreports(report):
            for key, value in (sub.get("ratios") or {}).items():
                if key.split(":")[-1] in ("fluxfs/gcsfs", "fluxfs/dataflux", "fluxfs/obstore", "fluxfs/tensorstore",
                                          "fluxfs/runai", "fluxfs/aiohttp") and not key.startswith(("cpu:", "rss:")):
                    labels.append(f"{label}: {key}")
                    values.append(value)
    if not labels:
        return
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(labels) + 1.2))
    ax.barh(labels, values, color=["#2a7" if v >= 1 else "#c44" for v in values])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("speed-up of fluxfs (x, median of runs; 1 = same speed)")
    commits = sorted({r.get("commit") or "?" for r in reports})
    dates = sorted(r["date"][:10] for r in reports if r.get("date"))
    span = f"{dates[0]} to {dates[-1]}" if dates and dates[0] != dates[-1] else (dates[0] if dates else "date ?")
    ax.set_title(f"commit {', '.join(commits)}; {span}", fontsize=9)
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__)
    parser.add_argument("--dir", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    results = Path(args.dir)
    paths = sorted(results.glob("*.json"))
    reports = [json.loads(p.read_text()) for p in paths]
    if not reports:
        print(f"no reports in {results}: run `make bench` or `python -m bench SCENARIO --json PATH` first")
        return 1
    md = table(reports) + "\n\nRuns:\n" + sources(reports, [p.name for p in paths])
    (results / "summary.md").write_text(md + "\n")
    plot(reports, results / "ratios.png")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
