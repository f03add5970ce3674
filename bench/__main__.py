"""`python -m bench SCENARIO [options]` (also `fluxfs bench`).

Every scenario runs its contenders interleaved in one process run, on the same server and data;
it quotes the median of the repeats (min and max kept), reports client CPU beside wall time,
and fails, rather than times, a contender that returns wrong data.

`python -m bench all` runs every scenario but chaos; `python -m bench SCENARIO --help` lists
the scenario's own options.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from .common import add_common_args

SCENARIOS = ("server", "listing", "reads", "checkpoint", "dcp", "weights", "collective", "training", "shards",
             "pack", "cache", "zonal", "chaos")


def scenario_parser(name: str) -> tuple[argparse.ArgumentParser, object]:
    module = importlib.import_module(f"bench.{name}")
    parser = argparse.ArgumentParser(prog=f"python -m bench {name}", description=module.__doc__)
    parser.add_argument("--json-dir", default=None, help="write SCENARIO-PROFILE.json here")
    add_common_args(parser)
    module.add_args(parser)
    return parser, module


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    top = argparse.ArgumentParser(prog="python -m bench", description=__doc__, add_help=False)
    top.add_argument("scenario", nargs="?", choices=SCENARIOS + ("all",))
    known, rest = top.parse_known_args(argv)
    if known.scenario is None:
        top.print_help()
        print("\ncommon options (every scenario):")
        common = argparse.ArgumentParser(prog="python -m bench SCENARIO", add_help=False)
        add_common_args(common)
        common.print_help()
        return 0 if {"-h", "--help"} & set(argv) else 2
    names = [s for s in SCENARIOS if s != "chaos"] if known.scenario == "all" else [known.scenario]
    summaries = []
    for name in names:
        parser, module = scenario_parser(name)
        # With "all", each scenario takes the options it knows and ignores the others'.
        args = parser.parse_known_args(rest)[0] if known.scenario == "all" else parser.parse_args(rest)
        if args.json_dir and not args.json:
            args.json = str(Path(args.json_dir) / f"{name}-{args.profile}.json")
        report = module.run(args)
        summaries.append(f"{name}: " + " ".join(f"{k}={v:g}x" for k, v in report.get("ratios", {}).items()))
    if len(summaries) > 1:
        print("\n".join(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
