"""The ``fluxfs`` console script: parse, run the command, and turn failures into one-line messages and exit codes.

The parser lives in `fluxfs.cli.parser` and the commands in the other modules of this package;
this module only decides how a run ends (one line on stderr, no traceback unless ``--debug``).
"""
from __future__ import annotations

import contextlib
import gc
import logging
import sys
import traceback
from typing import Iterator, List, Optional

from fluxfs.gcs.redact import RedactFilter, redact, scrub

from .base import (EXIT_BROKEN_PIPE, EXIT_ERROR, EXIT_EXISTS, EXIT_INTERRUPTED, EXIT_NOT_FOUND, EXIT_PERMISSION,
                   EXIT_USAGE, UsageError, printable)
from .parser import build_parser, parse_bench_passthrough


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the `fluxfs` console script; returns the exit code."""
    if argv is None:  # the console script: the process ends with this call
        try:
            return run(sys.argv[1:])
        finally:
            # Skip the interpreter's last garbage collection: with gcsfs and aiohttp loaded it costs up to
            # a second on a busy machine, which Ctrl-C users feel; the OS takes the memory back anyway.
            gc.freeze()
    return run(argv)


def run(argv: List[str]) -> int:
    """Parse `argv`, run the command, and turn its outcome into an exit code (one line on stderr if it failed)."""
    argv = list(argv)
    args = parse_bench_passthrough(argv)
    if args is None:
        parser = build_parser(argv)
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help, --version, or a usage error argparse already printed
            return int(exc.code or 0)
    try:
        with cli_logging(args.debug):
            return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:  # a command may say how far it got (cp: the files copied)
        print(f"fluxfs: interrupted{': ' + str(exc) if str(exc) else ''}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of our stdout went away (`| head`): not an error worth a message.
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except BaseException as exc:  # the one place every failure becomes a message
        if isinstance(exc, SystemExit):
            raise
        scrub(exc)  # no credentials in the message or the --debug traceback
        code, message = describe_error(exc)
        message = printable(redact(message))  # object names in it may hold terminal escapes
        if args.debug:
            traceback.print_exc()
        print(f"fluxfs {args.command}: {message}", file=sys.stderr)
        return code


class _NoTracebackFormatter(logging.Formatter):
    """One line per record: the CLI reports failures itself, tracebacks only with --debug."""

    def format(self, record: logging.LogRecord) -> str:
        record = logging.makeLogRecord(record.__dict__)
        record.exc_info = record.exc_text = record.stack_info = None
        return printable(super().format(record))  # object names in warnings may hold terminal escapes


@contextlib.contextmanager
def cli_logging(debug: bool) -> Iterator[None]:
    """--debug: everything at DEBUG with tracebacks; otherwise warnings only, one line each.

    Installed on the root logger for the duration of the command and removed afterwards, so
    calling `main()` in-process (tests, notebooks) leaves the caller's logging as it was.
    """
    root, gcsfs_log = logging.getLogger(), logging.getLogger("gcsfs")
    saved = root.level, gcsfs_log.level
    handler = logging.StreamHandler(sys.stderr)
    if debug:
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        root.setLevel(logging.DEBUG)
    else:
        handler.setFormatter(_NoTracebackFormatter("fluxfs: %(levelname)s: %(message)s"))
        handler.setLevel(logging.WARNING)
        # gcsfs logs every request it gives up on, with a traceback; the CLI's own message says it once.
        gcsfs_log.setLevel(logging.CRITICAL)
    handler.addFilter(RedactFilter())  # every record this prints, whichever library logged it
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        gcsfs_log.setLevel(saved[1])


# setup.cfg's `torch` extra (fluxfs.pipes.requirements), which the plain `pip install fluxfs` leaves out.
_TORCH_EXTRA = ("torch", "torchdata", "numpy", "braceexpand")


def describe_error(exc: BaseException) -> tuple[int, str]:
    """(exit code, one-line message) for a failure, naming what went wrong in the user's terms."""
    from fluxfs.errors import ChecksumMismatch, HttpError, ServerUnreachable

    text = str(exc) or type(exc).__name__
    if isinstance(exc, UsageError):
        return EXIT_USAGE, text
    if isinstance(exc, ModuleNotFoundError) and exc.name in _TORCH_EXTRA:  # shard, demo: fluxfs.pipes or torch
        return EXIT_ERROR, "needs PyTorch: pip install 'fluxfs[torch]'" + (
            "" if exc.name == "torch" else f" ({exc.name} is not installed)")
    if isinstance(exc, FileNotFoundError):
        return EXIT_NOT_FOUND, f"not found: {text}"
    if isinstance(exc, PermissionError):
        return EXIT_PERMISSION, (f"permission denied: {text} (check the token: -o token=..., "
                                 "GOOGLE_APPLICATION_CREDENTIALS or `gcloud auth application-default login`)")
    if isinstance(exc, FileExistsError):
        return EXIT_EXISTS, f"already exists: {text}"
    if isinstance(exc, ChecksumMismatch):
        return EXIT_ERROR, f"checksum mismatch: {text}"
    status = getattr(exc, "status", None) if isinstance(exc, HttpError) else getattr(exc, "code", None)
    if status in (401, 403):
        return EXIT_PERMISSION, f"permission denied: {text}"
    if status == 404:
        return EXIT_NOT_FOUND, f"not found: {text}"
    if isinstance(exc, ServerUnreachable):  # says which endpoint and what to do
        return EXIT_ERROR, text
    if _is_connection_error(exc):
        return EXIT_ERROR, f"cannot reach the storage endpoint: {text}"
    return EXIT_ERROR, f"{type(exc).__name__}: {text}"


def _is_connection_error(exc: BaseException) -> bool:
    """True for a failure to reach the endpoint at all (refused, reset, DNS), as opposed to an error reply."""
    try:
        import aiohttp
    except ImportError:  # pragma: no cover
        return isinstance(exc, ConnectionError)
    return isinstance(exc, (ConnectionError, aiohttp.ClientConnectionError))


def _silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so the interpreter's final flush does not complain."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
