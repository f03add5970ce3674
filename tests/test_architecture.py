"""The layout stays as docs/architecture.md draws it: layer contracts, no cycles, small modules,
and a repository that explains itself."""
from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 400


def test_import_contracts_hold():
    """.importlinter: cli > pipes > filesystem > shared base; the server stands alone; no torch below pipes;
    no cycles."""
    lint = pathlib.Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint), "--config", ".importlinter", "--no-cache"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout or "broken" not in out.stdout, out.stdout


def test_the_docs_list_the_layers_the_linter_checks():
    """docs/architecture.md's layer list is .importlinter's layers contract, line for line."""
    import configparser
    import re

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter", encoding="utf-8")
    checked = [ln.strip() for ln in cfg["importlinter:contract:layers"]["layers"].splitlines() if ln.strip()]
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- layers:[^\n]*-->\n```\n(.*?)```", doc, re.S)
    assert m, "docs/architecture.md lost its <!-- layers --> block"
    assert [ln.strip() for ln in m.group(1).splitlines() if ln.strip()] == checked


def _tracked(*patterns: str) -> list[pathlib.Path]:
    names = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    return [ROOT / n for n in names]


def test_no_module_is_over_the_size_limit():
    too_big = {str(p.relative_to(ROOT)): n for p in _tracked("fluxfs/*.py", "pipes/*.py")
               if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not too_big, f"modules over {MAX_MODULE_LINES} lines (split them by job): {too_big}"


def test_nothing_cites_files_outside_the_repository():
    """Everything the project needs to explain itself lives in it: no pointers to notes kept elsewhere."""
    needles = ("REFERENCE.md", "BENCH.md", "../shared", "shared/compat")
    hits = [f"{p.relative_to(ROOT)}: {needle}" for p in _tracked() if p.is_file() and p.suffix in
            (".py", ".md", ".cfg", ".toml", ".ipynb", ".txt", "") and p.name != "test_architecture.py"
            for needle in needles if needle in p.read_text(errors="replace")]
    assert not hits, hits


def _cli_imports_of_pipes() -> list[tuple[str, str]]:
    """(CLI module, pipes module) for every ``fluxfs.pipes...`` import in fluxfs/cli, those inside functions too."""
    import ast

    found = []
    for path in sorted((ROOT / "fluxfs" / "cli").glob("*.py")):
        module = "fluxfs.cli" + ("" if path.stem == "__init__" else f".{path.stem}")
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            found += [(module, "pipes" + n[len("fluxfs.pipes"):]) for n in names
                      if n == "fluxfs.pipes" or n.startswith("fluxfs.pipes.")]
    return found


def test_the_clis_imports_of_pipes_are_checked_too():
    """pipes/ is installed as fluxfs.pipes but analysed as `pipes`, so import-linter cannot see the CLI's
    ``from fluxfs.pipes... import`` (it resolves them to `fluxfs`): add them as edges and check that they
    name real modules and close no cycle through the CLI (pipes never reaches fluxfs.cli)."""
    import grimp

    graph = grimp.build_graph("fluxfs", "pipes", cache_dir=None)
    edges = _cli_imports_of_pipes()
    assert ("fluxfs.cli.shards", "pipes.shards") in edges   # the scan finds the imports inside functions
    for importer, imported in edges:
        assert imported in graph.modules, f"{importer} imports fluxfs.{imported}, which does not exist"
        graph.add_import(importer=importer, imported=imported)
    assert not graph.chain_exists(importer="pipes", imported="fluxfs.cli", as_packages=True)
    assert not graph.chain_exists(importer="fluxfs.core", imported="pipes", as_packages=True)


# The accelerations take the narrow client (fluxfs/gcs/client.py); gcsfs's internals are read in one module.
ACCELERATIONS = ("fluxfs/reads/*.py", "fluxfs/writes/*.py", "fluxfs/listing/*.py", "fluxfs/cache/*.py",
                 "fluxfs/gcs/*.py", "fluxfs/zonal/*.py", "fluxfs/temporaries.py", "fluxfs/temp_registry.py",
                 "fluxfs/temp_uploads.py")
RECEIVERS = {"fs", "client", "filesystem"}   # names that hold a filesystem or its client


def _receiver(node) -> str | None:
    import ast
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):   # self.fs, up.fs, self.pw.client
        return node.attr
    return None


def _fsspec_async_api() -> set[str]:
    """fsspec's async methods (`_cat_file`, `_info`, ...) and FluxFileSystem's own async twins of its public
    methods (`_read_ranges` of `read_ranges`): underscored by fsspec's convention, public API."""
    import inspect

    import fsspec
    from fsspec.asyn import AsyncFileSystem

    from fluxfs import FluxFileSystem
    fsspec_api = {n for n in dir(AsyncFileSystem) if n.startswith("_") and not n.startswith("__")
                  and hasattr(fsspec.AbstractFileSystem, n[1:])}
    twins = {n for n in dir(FluxFileSystem) if n.startswith("_") and not n.startswith("__")
             and hasattr(FluxFileSystem, n[1:]) and inspect.iscoroutinefunction(getattr(FluxFileSystem, n))}
    return fsspec_api | twins | {"_parent", "_strip_protocol"}  # fsspec's path classmethods, every filesystem's


def test_acceleration_modules_read_no_gcsfs_private():
    """No acceleration reaches into the filesystem: no `fs._name` (gcsfs's session, auth, endpoint, caches,
    attributes made on the fly), no `getattr(fs, "_name")`, no FluxFileSystem import; they take the Client."""
    import ast
    allowed = _fsspec_async_api()
    hits = []
    for path in _tracked(*ACCELERATIONS):
        tree = ast.parse(path.read_text())
        where = path.relative_to(ROOT)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and _receiver(node.value) in RECEIVERS and node.attr not in allowed:
                hits.append(f"{where}:{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2 \
                    and _receiver(node.args[0]) in RECEIVERS and isinstance(node.args[1], ast.Constant) \
                    and str(node.args[1].value).startswith("_"):
                hits.append(f"{where}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
            elif isinstance(node, ast.ImportFrom) and any(a.name == "FluxFileSystem" for a in node.names):
                hits.append(f"{where}:{node.lineno}: imports FluxFileSystem")
    assert not hits, "gcsfs's internals are read in fluxfs/gcsfs_adapter.py only: " + ", ".join(hits)


# google-cloud-storage's and grpc's internals are reached in one module too, as gcsfs's are.
GCS_ADAPTER = "fluxfs/zonal/gcs_adapter.py"
LIBRARIES = ("google", "grpc")
LIBRARY_USERS = ("fluxfs/zonal/*.py", "fluxfs/writes/appendable_uploader.py", "fluxfs/writes/zonal_append.py")


def _private_of_a_library(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] in LIBRARIES and any(p.startswith("_") and not p.startswith("__") for p in parts)


def test_google_cloud_storage_and_grpc_internals_are_reached_in_their_adapter_only():
    """Outside fluxfs/zonal/gcs_adapter.py (and the server, which serves the library's own message types): no import
    of a private module of google-cloud-storage or grpc (`google.cloud._storage_v2`, `grpc.aio._call`), nor of a
    private name from one; and where the library's objects are handled (fluxfs/zonal, the gRPC upload strategy), no
    private module named in a string (a logger's name), no `obj._private` read or set on anything but `self`, `cls`
    and `super()` (fluxfs's own state is kept beside the library's objects, by the adapter), no getattr/setattr
    of one."""
    import ast
    hits = []
    for path in _tracked("fluxfs/*.py"):
        where = str(path.relative_to(ROOT))
        if where == GCS_ADAPTER or where.startswith("fluxfs/server/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                hits += [f"{where}:{node.lineno}: import {a.name}" for a in node.names if _private_of_a_library(a.name)]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                if _private_of_a_library(node.module) or any(_private_of_a_library(f"{node.module}.{a.name}")
                                                             for a in node.names):
                    hits.append(f"{where}:{node.lineno}: from {node.module} import ...")
    users = {p for p in _tracked(*LIBRARY_USERS) if str(p.relative_to(ROOT)) != GCS_ADAPTER}
    fsspec = _fsspec_async_api()
    for path in sorted(users):
        where = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text())):
            own = _receiver(node.value) in ("self", "cls") if isinstance(node, ast.Attribute) else False
            own = own or isinstance(node, ast.Attribute) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "super"
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                    and not own and node.attr not in fsspec:
                hits.append(f"{where}:{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2 \
                    and isinstance(node.args[1], ast.Constant) and str(node.args[1].value).startswith("_"):
                hits.append(f"{where}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and " " not in node.value \
                    and _private_of_a_library(node.value):  # a logger's name
                hits.append(f"{where}:{node.lineno}: {node.value!r}")
    assert not hits, f"google-cloud-storage's and grpc's internals are reached in {GCS_ADAPTER} only: " + \
        ", ".join(hits)


def test_the_adapter_says_what_it_was_checked_against():
    """The adapters (google-cloud-storage's and grpc's; aiohttp's) name the versions they were checked against:
    constraints.txt's pins, which setup.cfg bounds."""
    from fluxfs.gcs.aiohttp_adapter import CHECKED_AGAINST as AIOHTTP
    from fluxfs.zonal.gcs_adapter import CHECKED_AGAINST
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    for checked in (CHECKED_AGAINST, AIOHTTP):
        assert {name: pins.get(name) for name in checked} == checked
    cfg = (ROOT / "setup.cfg").read_text()
    for name in ("google-cloud-storage[grpc]", "grpcio", "aiohttp"):
        assert any(line.strip().startswith(name + ">=") and ",<" in line for line in cfg.splitlines()), name


def test_the_node_cache_never_receives_the_filesystem():
    """fs -> cache -> fs is a cycle the import linter cannot see: the cache reads storage through the `Fetcher` it
    is handed (fluxfs/reads/cached.py). No function of fluxfs/cache takes a filesystem (a parameter `fs` or
    `filesystem`), names one, or calls the filesystem's own reads (`_cat_file`, `_read_ranges`, `_cat_objects`)."""
    import ast

    hits = []
    for path in sorted((ROOT / "fluxfs" / "cache").glob("*.py")):
        where = path.relative_to(ROOT)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                hits += [f"{where}:{node.lineno}: {node.name}({arg.arg})" for arg in
                         [*a.posonlyargs, *a.args, *a.kwonlyargs] if arg.arg in ("fs", "filesystem")]
            elif isinstance(node, ast.Name) and node.id in ("fs", "filesystem"):
                hits.append(f"{where}:{node.lineno}: {node.id}")
            elif isinstance(node, ast.Attribute) and node.attr in ("_cat_file", "_read_ranges", "_cat_objects", "fs"):
                hits.append(f"{where}:{node.lineno}: .{node.attr}")
    assert not hits, "the node cache is handed a Fetcher, never the filesystem: " + ", ".join(hits)


# torch's internals are reached in one module of pipes, as gcsfs's and google-cloud-storage's are in fluxfs.
TORCH_ADAPTER = "pipes/torch_adapter.py"
TORCH_LIBRARIES = ("torch", "torchdata", "lightning", "lightning_fabric", "pytorch_lightning")
NAMEDTUPLE_API = {"_fields", "_asdict", "_replace", "_make", "_field_defaults"}  # underscored, public


def _private_of_torch(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] in TORCH_LIBRARIES and any(p.startswith("_") and not p.startswith("__") for p in parts)


def _root(node) -> str | None:
    """The name an attribute chain starts from (`torch` of `torch.serialization._get_layout`)."""
    import ast
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _defined_in_pipes() -> set[str]:
    """Private names pipes itself defines: functions, methods, classes, attributes it assigns."""
    import ast
    names = set()
    for path in _tracked("pipes/*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def test_torch_internals_are_reached_in_their_adapter_only():
    """Outside pipes/torch_adapter.py, pipes imports no private module of torch, torchdata or lightning
    (`torch.distributed._shard`) nor a private name from one (`_StorageInfo`), reads no private attribute through
    them (`torch._C`, `torch.serialization._get_layout`), no private attribute of their objects by getattr, and
    calls no private method its classes inherit from theirs (`self._get_metadata_path`): each is the adapter's."""
    import ast
    own = _defined_in_pipes()
    hits = []
    for path in _tracked("pipes/*.py"):
        where = str(path.relative_to(ROOT))
        if where == TORCH_ADAPTER:
            continue
        tree = ast.parse(path.read_text())
        bound = set()  # names this module binds to torch's modules and objects
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bound |= {(a.asname or a.name).split(".")[0] for a in node.names
                          if a.name.split(".")[0] in TORCH_LIBRARIES}
                hits += [f"{where}:{node.lineno}: import {a.name}" for a in node.names if _private_of_torch(a.name)]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level \
                    and node.module.split(".")[0] in TORCH_LIBRARIES:
                bound |= {a.asname or a.name for a in node.names}
                if _private_of_torch(node.module) or any(_private_of_torch(f"{node.module}.{a.name}")
                                                         for a in node.names):
                    hits.append(f"{where}:{node.lineno}: from {node.module} import ...")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                root = _root(node.value)
                on_self = root in ("self", "cls") and isinstance(node.value, ast.Name) or (
                    isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                    and node.value.func.id == "super")
                if root in bound or on_self and node.attr not in own:
                    hits.append(f"{where}:{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2 \
                    and _receiver(node.args[0]) not in ("self", "cls") and isinstance(node.args[1], ast.Constant) \
                    and str(node.args[1].value).startswith("_") and not str(node.args[1].value).startswith("__") \
                    and node.args[1].value not in NAMEDTUPLE_API:
                hits.append(f"{where}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and " " not in node.value \
                    and _private_of_torch(node.value):  # a logger's or a warning's module name
                hits.append(f"{where}:{node.lineno}: {node.value!r}")
    assert not hits, f"torch's, torchdata's and lightning's internals are reached in {TORCH_ADAPTER} only: " + \
        ", ".join(hits)


def test_the_torch_adapter_says_what_it_was_checked_against():
    """pipes/torch_adapter.py names the versions it was checked against: constraints.txt's pins."""
    text = (ROOT / TORCH_ADAPTER).read_text()
    from pipes.torch_adapter import CHECKED_AGAINST
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    assert {name: pins.get(name) for name in CHECKED_AGAINST} == CHECKED_AGAINST
    assert all(f"{name} {version}" in text for name, version in CHECKED_AGAINST.items())
