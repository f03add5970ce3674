"""The commands that start something bigger: ``serve`` (the embedded server), ``bench`` and ``demo``.

Each hands over to the code that does the work (`fluxfs.server.cli`, ``python -m bench`` in a
source checkout, `fluxfs.cli.demo`), imported only when the command runs.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from .base import UsageError


def repo_root() -> Optional[Path]:
    """The source checkout holding bench/, if fluxfs runs from one (fluxfs/cli/launch.py is three levels down)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "bench" / "__main__.py").exists() else None


def cmd_bench(args: argparse.Namespace) -> int:
    """``fluxfs bench ARGS...``: ``python -m bench ARGS...`` in the source checkout; its exit code."""
    root = repo_root()
    if root is None:
        raise UsageError("the benchmarks ship with the source checkout (bench/), not the installed package: "
                         "run `make bench` or `python -m bench` from a clone")
    import subprocess

    return subprocess.call([sys.executable, "-m", "bench", *args.bench_args], cwd=str(root))


def cmd_demo(args: argparse.Namespace) -> int:
    """``fluxfs demo``: the training demo; 0 when every check passed."""
    from . import demo

    return demo.run(args)


def cmd_serve(args: argparse.Namespace) -> int:
    """``fluxfs serve``: run the embedded GCS-compatible server until Ctrl-C."""
    given = [o for o, dest in (("--endpoint", "endpoint"), ("-o", "options")) if getattr(args, dest, None)]
    if given:  # accepted before the command name, as for every command, but they configure a client
        raise UsageError(f"serve takes no {' or '.join(given)}: those configure the storage client; the server "
                         "listens on --host and --port")
    if getattr(args, "server_import_error", None):
        raise RuntimeError(f"the embedded server could not be imported: {args.server_import_error}")
    from fluxfs.server import cli as server_cli

    return server_cli.serve(args)
