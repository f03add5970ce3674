"""`fluxfs` as an outside user meets it: summaries without -q, names with NUL bytes, help text, start-up.

Commands run in-process through `fluxfs.cli.main` (the `cli` fixture of test_cli.py) or, where what
matters is the process (its imports, its real stdout/stderr), as a subprocess against the embedded server.
"""
from __future__ import annotations

import pytest

from tests.cli.test_cli import assert_clean_failure, cli  # noqa: F401 - `cli` is a fixture


# -- summaries: every command's non-quiet path ---------------------------------------------

def test_sample_images_to_a_bucket_prints_its_summary(cli, fs, bucket):
    r = cli("sample-images", "--count", "6", f"flux://{bucket}/imgs/")
    assert r.code == 0, r.err
    assert "Traceback" not in r.err and "UnboundLocalError" not in r.err
    assert "wrote 6 JPEG images of 4 classes" in r.err and f"flux://{bucket}/imgs/<class>/<n>.jpg" in r.err, r.err
    assert len(fs.find(f"{bucket}/imgs")) == 6


# -- names fluxfs cannot write -------------------------------------------------------------

def test_cp_refuses_an_object_name_with_a_nul_byte_naming_the_nul(cli, fs, bucket, tmp_path):
    fs.pipe({f"{bucket}/ds/ok": b"fine", f"{bucket}/ds/bad\x00name": b"nul"})
    dest = tmp_path / "dest"
    r = cli("-q", "cp", "-r", f"flux://{bucket}/ds", str(dest))
    assert_clean_failure(r, 2, "refusing", "NUL", "nothing was copied")
    assert "'.' or '..'" not in r.err, r.err
    assert "\\x00" in r.err  # the name as printed shows where the NUL is
    assert not dest.exists()


def test_cp_downloads_names_near_the_local_length_limit(cli, fs, bucket, tmp_path):
    """A 250-byte name is a valid local file name: the temporary name it is written under must be too."""
    names = ["a" * 250, "\u00e9" * 125, "b" * 255]  # 250, 250 and 255 bytes
    fs.pipe({f"{bucket}/ds/{n}": n.encode() * 3 for n in names})
    r = cli("-q", "cp", "-r", f"flux://{bucket}/ds", str(tmp_path / "out"))
    assert r.code == 0, r.err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(names)
    for n in names:
        assert (tmp_path / "out" / n).read_bytes() == n.encode() * 3


def test_cp_refuses_an_object_name_part_over_the_local_length_limit(cli, fs, bucket, tmp_path):
    fs.pipe({f"{bucket}/ds/ok": b"fine", f"{bucket}/ds/" + "x" * 300: b"long"})
    r = cli("-q", "cp", "-r", f"flux://{bucket}/ds", str(tmp_path / "out"))
    assert_clean_failure(r, 2, "refusing to copy", "x" * 300, "300 bytes long", "nothing was copied")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, why", [
    (b"bad\xffname.txt", "not valid UTF-8"),
    (b"line\nfeed.txt", "carriage return or line feed"),
    (b"x" * 250 + b".txt", "over GCS's limit of 1024"),
])
def test_cp_refuses_a_local_name_gcs_would_refuse_before_copying_anything(cli, fs, bucket, tmp_path, name, why):
    src = tmp_path / "src"
    deep = src / ("d" * 250) / ("e" * 250) / ("f" * 250) / ("g" * 250)  # with the long name: over 1024 bytes
    deep.mkdir(parents=True)
    (src / "ok.txt").write_bytes(b"fine")
    with open(bytes(deep) + b"/" + name, "wb") as f:
        f.write(b"data")
    r = cli("-q", "cp", "-r", str(src), f"flux://{bucket}/up/")
    assert_clean_failure(r, 2, "refusing to copy", why, "nothing was copied")
    shown = name.decode("utf-8", "backslashreplace").replace("\n", "\\x0a")
    assert shown in r.err, r.err
    assert fs.find(f"{bucket}/up") == []  # not even ok.txt: refused before any byte moved


# -- start-up: `pipe:fluxfs cat URL` runs once per shard ------------------------------------

IMPORTS = """
import json, os, sys
from fluxfs.cli.entry import main
code = main(sys.argv[1:])
sys.stdout.flush()
env = os.environ.get("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT")
print(json.dumps({"code": code, "modules": sorted(sys.modules), "env": env}), file=sys.stderr)
"""
NOT_FOR_CAT = ("torch", "pipes", "fluxfs.pipes", "fluxfs.server", "tqdm", "fluxfs.cli.transfers", "fluxfs.cli.demo",
               "PIL", "numpy", "gcsfs.extended_gcsfs", "google.cloud.storage_control_v2")


def modules_after(*argv: str) -> tuple[int, bytes, set]:
    """Run the CLI's main in a fresh interpreter; its exit code, stdout and the modules it imported."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"}
    r = subprocess.run([sys.executable, "-c", IMPORTS, *argv], capture_output=True, timeout=120, env=env)
    report = json.loads(r.stderr.decode().strip().splitlines()[-1])
    assert report["env"] is None  # the CLI left the environment its children inherit as it found it
    return report["code"], r.stdout, set(report["modules"])


def loaded(modules: set, names) -> list:
    return sorted(m for m in modules for n in names if m == n or m.startswith(n + "."))


@pytest.mark.slow
def test_cat_and_help_import_no_torch_server_pipes_or_progress_bars(flux_server, fs, bucket):
    fs.pipe({f"{bucket}/shard-000.tar": b"tar bytes \x00\xff" * 1000})
    code, out, modules = modules_after("--endpoint", flux_server.url, "cat", f"flux://{bucket}/shard-000.tar")
    assert code == 0 and out == b"tar bytes \x00\xff" * 1000
    assert loaded(modules, NOT_FOR_CAT) == []
    for argv in (["--help"], ["cat", "--help"], ["cp", "--help"]):
        code, out, modules = modules_after(*argv)
        assert code == 0 and b"usage: fluxfs" in out, argv
        # the parser alone: no filesystem, no gcsfs, none of what the commands import when they run
        assert loaded(modules, NOT_FOR_CAT + ("gcsfs", "fluxfs.core", "aiohttp")) == [], argv


@pytest.mark.slow
def test_serve_help_still_lists_the_server_options_and_demo_its_own():
    code, out, _ = modules_after("serve", "--help")
    assert code == 0 and b"--port PORT" in out and b"--profile" in out
    code, out, _ = modules_after("demo", "--help")
    assert code == 0 and b"--objects" in out and b"--checkpoint-mb" in out


# -- help text -----------------------------------------------------------------------------

def test_help_offers_only_options_that_mean_something(cli):
    serve = cli("serve", "--help", endpoint=None)
    assert serve.code == 0 and "--port PORT" in serve.text
    for meaningless in ("--endpoint", "-o KEY=VALUE", "--option", "--progress", "--quiet"):
        assert meaningless not in serve.text, (meaningless, serve.text)
    r = cli("serve", "--port", "0")  # --endpoint before the command: refused, naming it, before serving
    assert_clean_failure(r, 2, "serve takes no --endpoint")
    demo = cli("demo", "--help", endpoint=None)
    assert demo.code == 0 and "--endpoint URL" in demo.text and "-o KEY=VALUE" not in demo.text

    cp = cli("cp", "--help", endpoint=None)
    assert "SRC [SRC ...] DST" in " ".join(cp.text.split()) and "DST [" not in cp.text, cp.text
    assert "-j N, --jobs N" in cp.text

    shard = " ".join(cli("shard", "--help", endpoint=None).text.split())
    assert "256MB (MB = 10^6 bytes), 64MiB or 64M (2^20 bytes); default 256MB" in shard, shard
    assert "in powers of two" not in shard


def test_cp_with_one_path_is_a_usage_error_naming_dst(cli, tmp_path):
    r = cli("cp", str(tmp_path))
    assert r.code == 2 and "DST" in r.err, r.err


# -- progress bars: only on a terminal (or with --progress) --------------------------------

DEMO_BARS = """
import argparse, sys, time
import torch
from fluxfs.cli import demo

def slow_batches():  # lasts past the bars' one-second delay
    for _ in range(3):
        time.sleep(0.45)
        yield torch.rand(4, 3, 32, 32), torch.randint(0, 10, (4,))

for progress in (False, True):
    print(f"--- progress={progress}", file=sys.stderr, flush=True)
    n = demo.train_epoch(slow_batches(), 12, "training (fluxfs)",
                         argparse.Namespace(quiet=False, progress=progress), 0)[0]
    print(f"trained on {n}", file=sys.stderr, flush=True)
"""


@pytest.mark.slow
def test_demo_draws_no_progress_bar_into_a_redirected_log(tmp_path):
    """`make demo > log 2>&1`: the log gets the demo's lines but no bar (no carriage returns), as the README says."""
    import subprocess
    import sys

    log = tmp_path / "demo.log"
    with open(log, "wb") as f:
        r = subprocess.run([sys.executable, "-c", DEMO_BARS], stdout=f, stderr=subprocess.STDOUT, timeout=120)
    text = log.read_bytes().decode()
    assert r.returncode == 0, text
    redirected, asked = text.split("--- progress=True")
    assert "trained on 12" in redirected and "\r" not in redirected and "img/s" not in redirected, redirected
    assert "training (fluxfs)" in asked and "img" in asked, asked  # --progress still draws it
