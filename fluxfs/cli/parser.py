"""The ``fluxfs`` argument parser: every subcommand, its options, and the command module that runs it.

Only `fluxfs.cli.entry` imports this module; the command modules never do (they share
`fluxfs.cli.base` instead), so the package has no import cycle. A command's module is imported
only when it runs (`command`): `pipe:fluxfs cat URL` starts once per shard.
"""
from __future__ import annotations

import argparse
import importlib
from typing import Callable, Iterable, List, Optional

from fluxfs import __version__

from .cache import add_arguments as add_cache_arguments
from .samples import add_arguments as add_sample_arguments
from .shards import SHARD_EPILOG, SHARD_USAGE
from .shards import add_arguments as add_shard_arguments


def command(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The function ``fluxfs.cli.<module>.<name>``, imported only when the command runs.

    Start-up cost is paid per call (`pipe:fluxfs cat URL` runs once per shard): building the
    parser must not import what other commands need (the transfer pool, the server, tqdm).
    """
    def run(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(f"{__package__}.{module}"), name)(args)

    run.__name__ = run.__qualname__ = name
    return run


cmd_bench = command("launch", "cmd_bench")

EPILOG = """\
URLs are flux://BUCKET/PATH (gs:// and gcs:// are accepted as synonyms).
Storage options: --endpoint URL (or STORAGE_EMULATOR_HOST), -o key=value (repeatable, e.g.
-o token=/path/key.json -o compose=false), and FSSPEC_FLUX_<OPTION> environment variables.
Exit codes: 0 ok, 1 error, 2 bad usage or URL, 3 not found, 4 permission denied,
5 destination exists, 130 interrupted.
"""


CP_EPILOG = """\
Where copies land (the trailing-slash rule of `gcloud storage cp`):
  a destination ending in '/' receives each source under its own name, and so does a bucket root,
  an existing local directory (as in cp(1)), or any destination of several sources:
    cp -r ./images flux://b/data/   ->  flux://b/data/images/...
    cp -r flux://b/images out/      ->  out/images/...
  otherwise the destination names the copy itself:
    cp -r ./images flux://b/data    ->  flux://b/data/...
    cp -r flux://b/images out       ->  out/... (out/images/... if out is an existing directory)
  Unlike gcloud, whether a remote prefix already exists is not looked up: only the '/' counts.
  A '/' at the end of a source changes nothing: ./images/ and flux://b/images/ copy as images.
-n (no clobber), as in `gcloud storage cp -n`, the same in every direction: a destination that
  exists is skipped, the rest is copied, and the skipped ones are listed after the summary (exit 0).
An object whose name ends in '/' and holds data cannot become a local file: a download copies
  everything else, names it and exits 1 (zero-byte 'dir/' markers are skipped silently).
Ctrl-C stops a copy within about a second, says how many files were copied, and leaves no
  partial file or object (exit 130).
"""


def _common_options(suppress: bool, output: bool = True, storage: bool = True) -> argparse.ArgumentParser:
    """Options accepted both before and after the subcommand.

    The copy attached to each subcommand defaults to SUPPRESS so it does not overwrite a
    value given before the subcommand name. A subcommand gets only those that mean something to
    it: `serve` has no bars and no storage client (`output`, `storage` False), `demo` takes no -o.
    """
    d = (lambda v: argparse.SUPPRESS) if suppress else (lambda v: v)
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("common options")
    if output:
        g.add_argument("-q", "--quiet", action="store_true", default=d(False), help="no progress bars or summaries")
        g.add_argument("--progress", action="store_true", default=d(False),
                       help="progress bars even when stderr is not a terminal (by default only on a terminal)")
    g.add_argument("--debug", action="store_true", default=d(False),
                   help="log at DEBUG level and show tracebacks on errors")
    if storage:
        g.add_argument("--endpoint", metavar="URL", default=d(None),
                       help="storage endpoint, HOST:PORT or http://HOST:PORT as in STORAGE_EMULATOR_HOST "
                            "(default: STORAGE_EMULATOR_HOST or real GCS)")
    if storage is True:
        g.add_argument("-o", "--option", dest="options", metavar="KEY=VALUE", action="append", default=d([]),
                       help="a storage option for the filesystem (repeatable)")
    return p


def build_parser(argv: Optional[Iterable[str]] = None) -> argparse.ArgumentParser:
    """The `fluxfs` argument parser; each subcommand's ``func`` default is the function that runs it.

    Given the command line, the arguments of `serve` and `demo` (which import the server's and
    the demo's modules) are added only when that command is named in it; without, all are.
    """
    named = None if argv is None else set(argv)
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

    p = add("serve", command("launch", "cmd_serve"),
            "run the embedded GCS-compatible server on 127.0.0.1:9023 "
            "(prints its URL and the STORAGE_EMULATOR_HOST line to export, serves until Ctrl-C)",
            parents=(_common_options(suppress=True, output=False, storage=False),))
    if named is None or "serve" in named:
        try:
            from fluxfs.server import cli as server_cli

            server_cli.add_arguments(p, default_port=server_cli.SERVE_PORT)
        except ImportError as exc:  # pragma: no cover - only in a broken install
            p.set_defaults(server_import_error=str(exc))

    p = add("ls", command("listing", "cmd_ls"),
            "list objects and prefixes under a URL (buckets with flux://)")
    p.add_argument("url", nargs="?", default="flux://", help="flux://BUCKET[/PREFIX] (default flux://: the buckets)")
    p.add_argument("-r", "--recursive", action="store_true",
                   help="every object under the prefix (fast parallel lister)")
    p.add_argument("-l", "--long", action="store_true", help="also show size, update time and generation")
    p.add_argument("--unsorted", action="store_true", help="with -r: print in arrival order as the listing streams")

    p = add("du", command("listing", "cmd_du"),
            "total size of the objects under a URL, per top-level prefix")
    p.add_argument("url", help="flux://BUCKET[/PREFIX]")
    p.add_argument("-s", "--summarize", action="store_true", help="only the grand total")
    p.add_argument("-H", "--human", action="store_true", help="sizes like 1.5 MiB")

    p = add("manifest", command("listing", "cmd_manifest"),
            "write a JSON-lines manifest (name, size, generation, crc32c) of a prefix")
    p.add_argument("url", help="flux://BUCKET[/PREFIX]")
    p.add_argument("--output", "--out", dest="output", default="-", metavar="DEST",
                   help="file or flux:// URL (default: stdout)")

    p = add("cat", command("copying", "cmd_cat"),
            "write the bytes of one or more objects to stdout")
    p.add_argument("urls", nargs="+", metavar="url", help="flux://BUCKET/OBJECT; several are written one after another")

    p = add("cp", command("copying", "cmd_cp"),
            "copy between local files and flux:// (either direction), in parallel",
            epilog=CP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("srcs", nargs="+", metavar="SRC", help="local paths, or flux:// URLs (all of one kind)")
    p.add_argument("dst", metavar="DST", help="a local path or a flux:// URL")
    p.add_argument("-r", "--recursive", action="store_true", help="copy directories / prefixes")
    p.add_argument("-j", "--jobs", type=int, default=16, metavar="N", help="transfers in flight (default 16)")
    p.add_argument("-n", "--no-clobber", action="store_true",
                   help="skip destinations that already exist, and list them (as gcloud storage cp -n)")

    p = add("mb", command("maintenance", "cmd_mb"),
            "make a bucket (handy on `fluxfs serve`; on GCS it needs a project: -o project=...)")
    p.add_argument("url", help="flux://BUCKET")

    p = add("sample-images", command("samples", "cmd_sample_images"),
            "write a small labelled image dataset (JPEGs of coloured shapes, "
            "DEST/<class>/<n>.jpg) to a new local directory or a flux:// prefix, to try fluxfs with")
    add_sample_arguments(p)

    p = add("cleanup", command("maintenance", "cmd_cleanup"),
            "delete fluxfs temporary objects left behind by crashed jobs")
    p.add_argument("url", help="flux://BUCKET")
    p.add_argument("--older-than", default="1h", metavar="AGE",
                   help="only temporaries written and uploads started longer ago than this (each by its own time, "
                        "not its job's), e.g. 30m, 1h, 2d, 0 for all (default 1h)")
    p.add_argument("--abort-foreign-uploads", action="store_true",
                   help="also abort unfinished multipart uploads fluxfs did not start (another tool's; by default "
                        "they are only listed)")

    p = add("cache", command("cache", "cmd_cache"),
            "list, size or clear a node-local cache directory (the cache_dir option)")
    add_cache_arguments(p)

    p = add("shard", command("shards", "cmd_shard"),
            "pack a prefix of objects into tar shards (WebDataset layout, with an index per "
            "shard), or index existing shards", usage=SHARD_USAGE, epilog=SHARD_EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shard_arguments(p)

    # Only for --help: `main` hands everything after `bench` to python -m bench untouched.
    p = add("bench", cmd_bench, "run a benchmark scenario from the source checkout (python -m bench ...)",
            parents=())
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="scenario and its options, e.g. reads --quick")

    p = add("demo", command("launch", "cmd_demo"),
            "the end-to-end training demo on the embedded server "
            "(or on --endpoint URL)", parents=(_common_options(suppress=True, storage="endpoint"),))
    if named is None or "demo" in named:
        from . import demo  # here, not at the top: `python -m fluxfs.cli.demo` must find it not yet imported

        demo.add_arguments(p)
    return parser


def parse_bench_passthrough(argv: List[str]) -> Optional[argparse.Namespace]:
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
    ns.command, ns.func, ns.bench_args = "bench", cmd_bench, argv[i + 1:]
    return ns
