"""The ``fluxfs`` command: argument parsing, dispatch, and turning failures into clear messages and exit codes.

The commands themselves live in `fluxfs.cli_commands`; this module only decides what runs and
how a failure is reported (one line on stderr, no traceback unless ``--debug``).
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import traceback
from typing import Callable, Iterator, List, Optional

from . import __version__

# Exit codes: what a script calling `fluxfs` can test for.
EXIT_OK = 0
EXIT_ERROR = 1  # anything else (server error, network failure, checksum mismatch)
EXIT_USAGE = 2  # bad arguments, bad URL, unsafe destination path (argparse also uses 2)
EXIT_NOT_FOUND = 3  # bucket or object does not exist
EXIT_PERMISSION = 4  # 401/403: missing or wrong credentials, or no permission
EXIT_EXISTS = 5  # destination exists and overwriting was not asked for
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
EXIT_BROKEN_PIPE = 141  # `fluxfs cat ... | head`: the reader went away, as shells report SIGPIPE

EPILOG = """\
URLs are flux://BUCKET/PATH (gs:// and gcs:// are accepted as synonyms).
Storage options: --endpoint URL (or STORAGE_EMULATOR_HOST), -o key=value (repeatable, e.g.
-o token=/path/key.json -o compose=false), and FSSPEC_FLUX_<OPTION> environment variables.
Exit codes: 0 ok, 1 error, 2 bad usage or URL, 3 not found, 4 permission denied,
5 destination exists, 130 interrupted.
"""


class UsageError(ValueError):
    """A mistake in what the user asked for (bad URL, bad option, unsafe path): exit code 2."""


def _common_options(suppress: bool) -> argparse.ArgumentParser:
    """Options accepted both before and after the subcommand.

    The copy attached to each subcommand defaults to SUPPRESS so it does not overwrite a
    value given before the subcommand name.
    """
    d = (lambda v: argparse.SUPPRESS) if suppress else (lambda v: v)
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("common options")
    g.add_argument("-q", "--quiet", action="store_true", default=d(False), help="no progress bars or summaries")
    g.add_argument("--debug", action="store_true", default=d(False),
                   help="log at DEBUG level and show tracebacks on errors")
    g.add_argument("--endpoint", metavar="URL", default=d(None),
                   help="storage endpoint, e.g. http://127.0.0.1:4443 (default: STORAGE_EMULATOR_HOST or real GCS)")
    g.add_argument("-o", "--option", dest="options", metavar="KEY=VALUE", action="append", default=d([]),
                   help="a storage option for the filesystem (repeatable)")
    return p


def build_parser() -> argparse.ArgumentParser:
    """The full `fluxfs` argument parser."""
    from . import cli_commands as c

    common = _common_options(suppress=True)
    parser = argparse.ArgumentParser(
        prog="fluxfs", parents=[_common_options(suppress=False)],
        description="Fast Google Cloud Storage for PyTorch: list, copy, inspect and serve flux:// buckets.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fluxfs {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(name: str, func: Callable, help: str, parents=(common,), **kw) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=list(parents), help=help, description=help, **kw)
        p.set_defaults(func=func)
        return p

    p = add("serve", c.cmd_serve, "run the embedded GCS-compatible server (prints its URL, serves until Ctrl-C)")
    try:
        from .server import cli as server_cli

        server_cli.add_arguments(p)
    except ImportError as exc:  # pragma: no cover - only in a broken install
        p.set_defaults(server_import_error=str(exc))

    p = add("ls", c.cmd_ls, "list objects and prefixes under a URL (buckets with flux://)")
    p.add_argument("url", nargs="?", default="flux://", help="flux://BUCKET[/PREFIX]")
    p.add_argument("-r", "--recursive", action="store_true", help="every object under the prefix (fast parallel lister)")
    p.add_argument("-l", "--long", action="store_true", help="also show size, update time and generation")
    p.add_argument("--unsorted", action="store_true", help="with -r: print in arrival order as the listing streams")

    p = add("du", c.cmd_du, "total size of the objects under a URL, per top-level prefix")
    p.add_argument("url", help="flux://BUCKET[/PREFIX]")
    p.add_argument("-s", "--summarize", action="store_true", help="only the grand total")
    p.add_argument("-H", "--human", action="store_true", help="sizes like 1.5 MiB")

    p = add("manifest", c.cmd_manifest, "write a JSON-lines manifest (name, size, generation, crc32c) of a prefix")
    p.add_argument("url", help="flux://BUCKET[/PREFIX]")
    p.add_argument("--output", "--out", dest="output", default="-", help="file or flux:// URL (default: stdout)")

    p = add("cat", c.cmd_cat, "write the bytes of one or more objects to stdout")
    p.add_argument("urls", nargs="+", metavar="url")

    p = add("cp", c.cmd_cp, "copy between local files and flux:// (either direction), in parallel")
    p.add_argument("paths", nargs="+", metavar="SRC... DST")
    p.add_argument("-r", "--recursive", action="store_true", help="copy directories / prefixes")
    p.add_argument("-j", "--jobs", type=int, default=16, help="transfers in flight (default 16)")
    p.add_argument("-n", "--no-clobber", action="store_true", help="fail if a destination already exists")

    p = add("mb", c.cmd_mb, "make a bucket (handy on `fluxfs serve`; on GCS it needs a project: -o project=...)")
    p.add_argument("url", help="flux://BUCKET")

    p = add("cleanup", c.cmd_cleanup, "delete fluxfs temporary objects left behind by crashed jobs")
    p.add_argument("url", help="flux://BUCKET")
    p.add_argument("--older-than", default="1h", metavar="AGE",
                   help="only temporaries of jobs older than this, e.g. 30m, 1h, 2d, 0 for all (default 1h)")

    # Only for --help: `main` hands everything after `bench` to python -m bench untouched.
    p = add("bench", c.cmd_bench, "run a benchmark scenario from the source checkout (python -m bench ...)",
            parents=())
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="scenario and its options, e.g. reads --quick")

    p = add("demo", c.cmd_demo, "the end-to-end training demo on the embedded server")
    from . import demo

    demo.add_arguments(p)
    return parser


def _parse_bench_passthrough(argv: List[str]) -> Optional[argparse.Namespace]:
    """`fluxfs [common options] bench ARGS...`: everything after `bench` goes to python -m bench verbatim."""
    if "bench" not in argv:
        return None
    i = argv.index("bench")
    try:
        ns, extra = _common_options(suppress=False).parse_known_args(argv[:i])
    except SystemExit:
        return None
    if extra:  # "bench" was an argument of another command, e.g. `fluxfs ls flux://bench`
        return None
    from . import cli_commands as c

    ns.command, ns.func, ns.bench_args = "bench", c.cmd_bench, argv[i + 1:]
    return ns


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the `fluxfs` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse_bench_passthrough(argv)
    if args is None:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help, --version, or a usage error argparse already printed
            return int(exc.code or 0)
    try:
        with cli_logging(args.debug):
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("fluxfs: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader of our stdout went away (`| head`): not an error worth a message.
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except BaseException as exc:  # noqa: BLE001 - the one place every failure becomes a message
        if isinstance(exc, SystemExit):
            raise
        code, message = describe_error(exc)
        if args.debug:
            traceback.print_exc()
        print(f"fluxfs {args.command}: {message}", file=sys.stderr)
        return code


class _NoTracebackFormatter(logging.Formatter):
    """One line per record: the CLI reports failures itself, tracebacks only with --debug."""

    def format(self, record: logging.LogRecord) -> str:
        record = logging.makeLogRecord(record.__dict__)
        record.exc_info = record.exc_text = record.stack_info = None
        return super().format(record)


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
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        gcsfs_log.setLevel(saved[1])


def describe_error(exc: BaseException) -> tuple[int, str]:
    """(exit code, one-line message) for a failure, naming what went wrong in the user's terms."""
    from .errors import ChecksumMismatch, HttpError

    text = str(exc) or type(exc).__name__
    if isinstance(exc, UsageError):
        return EXIT_USAGE, text
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
    if _is_connection_error(exc):
        return EXIT_ERROR, f"cannot reach the storage endpoint: {text}"
    return EXIT_ERROR, f"{type(exc).__name__}: {text}"


def _is_connection_error(exc: BaseException) -> bool:
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
