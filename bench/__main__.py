"""`python -m bench SCENARIO [options]` (also `fluxfs bench`): see shared BENCH.md for the rules."""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from .common import add_common_args

SCENARIOS = ("server", "listing", "reads", "checkpoint", "dcp", "training", "chaos")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("scenario", choices=SCENARIOS + ("all",))
    parser.add_argument("--json-dir", default=None, help="with 'all': write SCENARIO-PROFILE.json files here")
    add_common_args(parser)
    known, rest = parser.parse_known_args(argv)
    names = [s for s in SCENARIOS if s != "chaos"] if known.scenario == "all" else [known.scenario]
    summaries = []
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        sub = argparse.ArgumentParser(prog=f"python -m bench {name}")
        add_common_args(sub)
        sub.add_argument("scenario")
        sub.add_argument("--json-dir", default=None)
        module.add_args(sub)
        args = sub.parse_args([name] + (argv if argv is not None else sys.argv[1:])[1:])
        if args.json_dir and not args.json:
            args.json = str(Path(args.json_dir) / f"{name}-{args.profile}.json")
        report = module.run(args)
        summaries.append(f"{name}: " + " ".join(f"{k}={v:g}x" for k, v in report.get("ratios", {}).items()))
    if len(summaries) > 1:
        print("\n".join(summaries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
