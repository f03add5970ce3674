"""The benchmark harness: interleaved contenders, medians of repeats, ratios, JSON reports.

The rules it enforces (also stated in bench/__init__.py): all contenders run in one process run
on the same server and data, interleaved (A B C A B C ...); the figure quoted is the median,
min and max are kept; client CPU seconds are reported beside wall time; a contender returning
wrong data fails, not timed.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

HEADLINE_DERIVED = {"objects_per_s": ("objects", "wall_s"), "mb_per_s": ("bytes", "wall_s")}


class WrongResult(AssertionError):
    """A contender returned wrong bytes or counts: reported as failed, not timed."""


class Skipped(Exception):
    """A contender that cannot run here (its package is not installed): reported as skipped, not failed."""


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


class PeakMemory:
    """Peak resident memory above the start of the block, from the kernel's high-water mark.

    Entering writes 5 to /proc/self/clear_refs (resets VmHWM to the current RSS); leaving reads
    VmHWM. Unlike `ru_maxrss` this is the process's own figure (a child inherits its parent's
    ru_maxrss) and it misses no short peak. Where the reset is refused, RSS is sampled every 5 ms.
    """

    def __enter__(self) -> "PeakMemory":
        self._sampler = None
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.base = _status_kib("VmHWM") * 1024
            self.exact = True
        except OSError:
            import threading

            self.exact = False
            self.base = self.peak = _status_kib("VmRSS") * 1024
            stop = threading.Event()

            def sample() -> None:
                while not stop.wait(0.005):
                    self.peak = max(self.peak, _status_kib("VmRSS") * 1024)
            self._sampler = (stop, threading.Thread(target=sample, daemon=True))
            self._sampler[1].start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._sampler is None:
            self.peak = _status_kib("VmHWM") * 1024
        else:
            self._sampler[0].set()
            self._sampler[1].join()
            self.peak = max(self.peak, _status_kib("VmRSS") * 1024)

    @property
    def extra_mb(self) -> float:
        """MiB above the resident size at entry."""
        return (self.peak - self.base) / 2**20


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", choices=("local", "cloud"), default="cloud",
                        help="server preset: local (none) or cloud (30 ms first byte, 100 MB/s per request)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per contender; the median is reported")
    parser.add_argument("--quick", action="store_true", help="small sizes, under a minute")
    parser.add_argument("--json", metavar="PATH", help="write the JSON report here")
    parser.add_argument("--objects", type=int, default=None, help="number of objects (scenario default if unset)")
    parser.add_argument("--size", type=int, default=None, help="object or state-dict size in bytes")
    parser.add_argument("--only", default=None, help="comma-separated contender names to run")


def _cpu_seconds() -> float:
    """User+sys CPU of this process and its waited-for children (process-pool contenders)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _sys_seconds() -> float:
    """System (kernel) CPU of this process and its waited-for children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_stime + kids.ru_stime


def measure(fn: Callable[[], dict | None]) -> dict:
    """Run one contender once; add wall_s, cpu_s and derived rates to what it returns."""
    cpu0, sys0, t0 = _cpu_seconds(), _sys_seconds(), time.perf_counter()
    out = dict(fn() or {})
    wall, cpu, sys_ = time.perf_counter() - t0, _cpu_seconds() - cpu0, _sys_seconds() - sys0
    out.setdefault("wall_s", wall)
    out.setdefault("cpu_s", cpu)
    out.setdefault("sys_s", sys_)
    if out.get("bytes"):
        out.setdefault("cpu_s_per_gb", out["cpu_s"] / (out["bytes"] / 1e9))
        out.setdefault("sys_s_per_gb", out["sys_s"] / (out["bytes"] / 1e9))
    if out.get("objects"):
        out.setdefault("cpu_us_per_object", out["cpu_s"] / out["objects"] * 1e6)
    for rate, (count, per) in HEADLINE_DERIVED.items():
        if rate not in out and count in out and out[per] > 0:
            value = out[count] / out[per]
            out[rate] = value / 1e6 if rate == "mb_per_s" else value
    return out


def _summaries(runs: list[dict]) -> dict:
    keys = sorted({k for r in runs for k, v in r.items() if isinstance(v, (int, float))})
    pick = lambda f: {k: f([r[k] for r in runs if k in r]) for k in keys}  # noqa: E731
    return {"median": pick(statistics.median), "min": pick(min), "max": pick(max), "runs": runs}


def run_scenario(
    scenario: str,
    args: argparse.Namespace,
    params: dict,
    contenders: dict[str, Callable[[], dict | None]],
    headline: str | Sequence[str],
    ratios: Sequence[tuple[str, str]],
    lower_is_better: bool = False,
) -> dict:
    """Run contenders interleaved `args.repeat` times; print a table and a ratio summary; return the report."""
    headlines = [headline] if isinstance(headline, str) else list(headline)
    params = {**params, "repeat": args.repeat}
    if args.only:
        keep = set(args.only.split(","))
        contenders = {k: v for k, v in contenders.items() if k in keep}
    runs: dict[str, list[dict]] = {name: [] for name in contenders}
    errors: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for i in range(args.repeat):
        for name, fn in contenders.items():
            if name in errors or name in skipped:
                continue
            try:
                result = measure(fn)
            except Skipped as exc:  # a peer that is not installed: not an error
                skipped[name] = str(exc)
                print(f"  [{scenario}] {name} skipped: {exc}", file=sys.stderr)
                continue
            except Exception as exc:  # a contender that fails is reported, the others go on
                errors[name] = f"{type(exc).__name__}: {exc}"
                print(f"  [{scenario}] {name} failed: {errors[name]}", file=sys.stderr)
                if os.environ.get("FLUXFS_BENCH_DEBUG"):
                    traceback.print_exc()
                continue
            runs[name].append(result)
            shown = ", ".join(f"{h}={result.get(h, float('nan')):.1f}" for h in headlines)
            print(f"  [{scenario}] run {i + 1}/{args.repeat} {name}: {shown} cpu={result['cpu_s']:.1f}s",
                  file=sys.stderr, flush=True)
    report: dict[str, Any] = {"scenario": scenario, "profile": args.profile, "params": params, "contenders": {}}
    for name in contenders:
        if name in skipped:
            report["contenders"][name] = {"skipped": skipped[name]}
        else:
            report["contenders"][name] = {"error": errors[name]} if name in errors else _summaries(runs[name])
    report["ratios"] = compute_ratios(report["contenders"], headlines, ratios, lower_is_better)
    report["machine"] = machine_info()
    print_report(report, headlines)
    return save_report(args, report)


def save_report(args: argparse.Namespace, report: dict) -> dict:
    """Write the report to --json PATH, if given, with the machine, the git commit and the UTC date it was
    made on (what a README row cites); returns it."""
    report.setdefault("machine", machine_info())
    report.setdefault("commit", git_commit())
    report.setdefault("date", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2))
    return report


def finish_combined(scenario: str, args: argparse.Namespace, combined: dict) -> dict:
    """For scenarios made of several sub-reports: machine info, the one-line ratio summary, JSON."""
    combined["machine"] = machine_info()
    print(f"ratios ({scenario}, {args.profile}): "
          + "  ".join(f"{k}={v:g}x" for k, v in combined["ratios"].items()))
    return save_report(args, combined)


def compute_ratios(contenders: dict, headlines: list[str], pairs: Sequence[tuple[str, str]],
                   lower_is_better: bool = False) -> dict[str, float]:
    """Ratios of headline medians; a metric prefix ("save:") when there are several headlines."""
    out: dict[str, float] = {}
    for metric in headlines:
        for a, b in pairs:
            ma = contenders.get(a, {}).get("median", {}).get(metric)
            mb = contenders.get(b, {}).get("median", {}).get(metric)
            if not ma or not mb:
                continue
            key = f"{a}/{b}" if len(headlines) == 1 else f"{metric.split('_')[0]}:{a}/{b}"
            out[key] = round((mb / ma) if lower_is_better else (ma / mb), 2)
    return out


@functools.lru_cache(maxsize=None)
def git_commit() -> str | None:
    """`git rev-parse --short HEAD` of the checkout bench/ is in (None outside a checkout or without git)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        return None


def machine_info() -> dict:
    """What the figures were measured on: CPUs (count and model), OS, Python and torch versions."""
    info = {"cpus": os.cpu_count(), "cpu": _cpu_model() or platform.processor() or None,
            "os": platform.platform(), "python": platform.python_version()}
    try:
        from importlib.metadata import version

        info["torch"] = version("torch")
    except Exception:
        pass
    return info


def print_report(report: dict, headlines: list[str]) -> None:
    print(f"\n== {report['scenario']} ({report['profile']} profile) {report['params']}")
    cols = headlines + ["wall_s", "cpu_s"]
    print(f"{'contender':<24}" + "".join(f"{c:>16}" for c in cols))
    for name, c in report["contenders"].items():
        if "error" in c or "skipped" in c:
            print(f"{name:<24}  {'error' if 'error' in c else 'skipped'}: {c.get('error', c.get('skipped'))[:100]}")
            continue
        med = c["median"]
        print(f"{name:<24}" + "".join(f"{med.get(k, float('nan')):>16.2f}" for k in cols))
    summary = "  ".join(f"{k}={v:g}x" for k, v in report["ratios"].items()) or "no ratios"
    repeat = report['params'].get('repeat', '?')
    print(f"ratios ({report['scenario']}, {report['profile']}, median of {repeat}): {summary}")


@contextlib.contextmanager
def start_server(args: argparse.Namespace, in_process: bool = False, **settings: Any) -> Iterator[Any]:
    """The fluxfs server in a subprocess (so it does not share our GIL) with the chosen profile."""
    from fluxfs.server import run

    with run(profile=args.profile, in_process=in_process, **settings) as srv:
        yield srv


def check_equal(got: Any, expected: Any, what: str) -> None:
    """Raise WrongResult (the contender is then reported failed) unless got == expected."""
    if got != expected:
        raise WrongResult(f"{what}: wrong result")
