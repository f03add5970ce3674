"""`python -m bench.report`: the README's benchmark table and a ratio plot from bench/results/*.json.

Every figure comes from a JSON report written by a benchmark run; nothing is typed in by hand.
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
PEERS = ("gcsfs", "dataflux", "dataflux-best", "webdataset", "obstore", "tensorstore", "runai", "limit")
# The contender a column shows, in order of preference: scenarios name their variants differently
# (shards: fluxfs-shards; packing: pack; weights: gcsfs-disk, gcsfs's best, and gcsfs-cat).
ALIASES = {"fluxfs": ("fluxfs", "fluxfs-shards", "pack"), "gcsfs": ("gcsfs", "gcsfs-disk", "gcsfs-cat")}
# Rows beside the headline: client CPU per GB (lower is better) and peak memory above the start.
EXTRA_ROWS = (("cpu_s_per_gb", "load_cpu_s_per_gb", "CPU s/GB", "cpu:"),
              ("peak_mb", "load_extra_rss_mb", "peak MiB", "rss:"))


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
            contenders = sub.get("contenders", {})
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
                extra = prefix in ("cpu:", "rss:")
                shown = {k: v for k, v in ratios.items()
                         if k.startswith(prefix) or (not extra and ":" not in k)}
                ratio_text = ", ".join(f"{k.split(':')[-1]} {v:g}x" for k, v in shown.items())
                lines.append(f"| {label} ({sub.get('profile')}) | {unit} | " + " | ".join(cells) + f" | {ratio_text} |")
    return "\n".join(lines)


def plot(reports: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, values = [], []
    for report in reports:
        for label, sub in subreports(report):
            for key, value in (sub.get("ratios") or {}).items():
                if key.split(":")[-1] in ("fluxfs/gcsfs", "fluxfs/dataflux", "fluxfs/obstore", "fluxfs/tensorstore",
                                          "fluxfs/runai") and not key.startswith(("cpu:", "rss:")):
                    labels.append(f"{label}: {key}")
                    values.append(value)
    if not labels:
        return
    fig, ax = plt.subplots(figsize=(9, 0.35 * len(labels) + 1.2))
    ax.barh(labels, values, color=["#2a7" if v >= 1 else "#c44" for v in values])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xlabel("speed-up of fluxfs (x, median of runs; 1 = same speed)")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__)
    parser.add_argument("--dir", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    results = Path(args.dir)
    reports = [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]
    if not reports:
        print(f"no reports in {results}: run `make bench` or `python -m bench SCENARIO --json PATH` first")
        return 1
    md = table(reports)
    (results / "summary.md").write_text(md + "\n")
    plot(reports, results / "ratios.png")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
