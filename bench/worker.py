"""A benchmark worker in its own Python process: started by `run_python`, left by `leave`.

Workers leave with os._exit, skipping interpreter finalization: the peers' native threads can still be
inside Python when the work is done (obstore resolves each asyncio future from a tokio thread through
`loop.call_soon_threadsafe`; the loop can run that callback, and the worker finish, while the thread is
still writing the loop's wake-up byte with the GIL released). Python < 3.14 ends a thread that takes the
GIL back during finalization with pthread_exit, which aborts the process (SIGABRT, nothing on stderr)
when it unwinds through Rust frames: a run whose work was done and checked would be reported as failed.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Callable, NoReturn

from .common import WrongResult

ROOT = Path(__file__).resolve().parents[1]


def leave(job: Callable[[], dict]) -> NoReturn:
    """Run `job` and leave without finalization: its figures printed as JSON (exit 0), or its traceback (exit 1)."""
    code = 1
    try:
        figures = job()
        print(json.dumps(figures), flush=True)
        code = 0
    except BaseException:  # noqa: B036 - whatever stopped the job, the worker says why and leaves the same way
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _ending(returncode: int) -> str:
    if returncode >= 0:
        return f"exit status {returncode}"
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def _result(stdout: str) -> dict | None:
    """The JSON object a worker's stdout ends with, or None."""
    lines = stdout.strip().splitlines()
    try:
        got = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    return got if isinstance(got, dict) else None


def failure(what: str, out: subprocess.CompletedProcess) -> str:
    """Why worker `what` failed: how it ended, whether it had printed its result, its stderr's tail."""
    printed = ", after printing its result" if _result(out.stdout) is not None else ""
    tail = out.stderr.strip()[-800:] or "nothing on stderr"
    return f"{what} ({_ending(out.returncode)}{printed}): {tail}"


def run_python(args: list[str], *, what: str, env: dict, timeout: float, stdin: str | None = None) -> dict:
    """Run `python *args` in ROOT; the JSON its stdout ends with. A failure raises RuntimeError saying why
    (`failure`), or `WrongResult` when the worker's own check refused what it read."""
    out = subprocess.run([sys.executable, *args], input=stdin, cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        raise (WrongResult if "WrongResult" in out.stderr[-800:] else RuntimeError)(failure(what, out))
    got = _result(out.stdout)
    if got is None:
        raise RuntimeError(f"{what} (exit status 0) printed no result: {out.stdout.strip()[-200:]!r}")
    return got


def pythonpath(*first: str) -> str:
    """PYTHONPATH for a worker: `first`, then the caller's own PYTHONPATH (kept, not replaced)."""
    return os.pathsep.join([*first, *filter(None, [os.environ.get("PYTHONPATH")])])
