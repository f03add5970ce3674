"""Security: a planted bearer token never shows in logs, reprs or exception messages; torch.load is weights_only.

The server requires the token (so every request really carries it), every logger runs at DEBUG,
and the test drives listing, compose-backed reads, multipart writes (XML and compose), retried
faults, a 404, a 403, a 401 and checkpoint save/load before grepping everything a user could see.
"""
from __future__ import annotations

import inspect
import logging
import pickle
import secrets
import traceback

import pytest
import torch
from google.oauth2.credentials import Credentials

from fluxfs import FluxFileSystem
from tests.conftest import make_fs

MiB = 2**20


def _texts_of(exc: BaseException) -> list[str]:
    """str, repr and the formatted traceback of an exception and its causes."""
    out = []
    while exc is not None:
        out += [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
        exc = exc.__cause__ or exc.__context__
    return out


@pytest.fixture
def planted(flux_server):
    token = "planted-token-" + secrets.token_hex(12)
    flux_server.configure(require_token=token)
    return token


def _fs(flux_server, token, **options) -> FluxFileSystem:
    options.setdefault("retry", {"initial": 0.001, "maximum": 0.01, "max_attempts": 20})
    return FluxFileSystem(endpoint_url=flux_server.url, token=Credentials(token), skip_instance_cache=True, **options)


def test_token_never_appears_in_logs_reprs_or_errors(flux_server, bucket, planted, caplog):

    caplog.set_level(logging.DEBUG)
    names = set(logging.root.manager.loggerDict) | {"fluxfs", "gcsfs", "aiohttp", "urllib3", "google", ""}
    old_levels = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.DEBUG)
    seen: list[str] = []
    try:
        # Without the token nothing works: proves every request below carries it.
        anon = make_fs(flux_server)
        with pytest.raises(PermissionError) as denied:
            anon.cat_file(f"{bucket}/x")
        seen += _texts_of(denied.value)

        fs = _fs(flux_server, planted, part_size=5 * MiB)
        flux_server.generate(bucket, 200, size=(1, 200), prefix="s/")
        infos = [i for b in fs.iter_objects(f"{bucket}/s") for i in b]
        assert len(fs.find(f"{bucket}/s")) == 200
        flux_server.reset_stats()
        got = fs.cat_objects(infos)
        assert len(got) == 200 and flux_server.stats()["requests"].get("compose", 0) > 0
        # XML multipart (3 parts) and compose-mode multipart (5 parts) writes.
        data = secrets.token_bytes(11 * MiB)
        with fs.open(f"{bucket}/xml.bin", "wb") as f:
            f.write(data)
        cfs = _fs(flux_server, planted, multipart="compose", part_size=64 * 1024)
        with cfs.open(f"{bucket}/composed.bin", "wb") as f:
            f.write(data[: 5 * 64 * 1024])
        assert fs.cat_file(f"{bucket}/xml.bin") == data
        # Retried faults (logged at DEBUG by the retry policy), then a failure that gives up.
        flux_server.configure(fail_rate=0.3, fail_codes=(503,), seed=2)
        assert fs.cat_objects(infos) == got
        flux_server.configure(fail_rate=1.0, fail_ops={"read"})
        few = _fs(flux_server, planted, retry={"max_attempts": 2, "initial": 0.001})
        with pytest.raises(OSError) as gave_up:
            few.cat_file(f"{bucket}/xml.bin")
        seen += _texts_of(gave_up.value)
        flux_server.configure(fail_rate=0.0)
        # 404 and 403 (denied delete and list).
        with pytest.raises(FileNotFoundError) as missing:
            fs.cat_file(f"{bucket}/missing")
        seen += _texts_of(missing.value)
        flux_server.configure(deny_ops={"list"})
        with pytest.raises(PermissionError) as forbidden:
            fs.find(f"{bucket}/s")
        seen += _texts_of(forbidden.value)
        flux_server.configure(deny_ops={"delete"})
        with pytest.raises(OSError) as no_delete:
            fs.rm(f"{bucket}/xml.bin")
        seen += _texts_of(no_delete.value)
        flux_server.configure(deny_ops=[])
        # Checkpoints through the same credentials.
        from fluxfs.pipes import FluxCheckpoint

        ckpt = FluxCheckpoint(endpoint_url=flux_server.url, token=Credentials(planted), skip_instance_cache=True)
        ckpt.save({"w": torch.ones(3)}, f"flux://{bucket}/model.pt")
        assert torch.equal(ckpt.load(f"flux://{bucket}/model.pt")["w"], torch.ones(3))
        seen += [repr(fs), str(fs), repr(cfs), repr(ckpt), repr(fs.storage_options), repr(ckpt.fs)]
        with fs.open(f"{bucket}/xml.bin", "rb") as f:
            seen.append(repr(f))
        w = fs.open(f"{bucket}/never.bin", "wb")
        seen.append(repr(w))
        w.discard()
    finally:
        for name, level in old_levels.items():  # leave logging as it was (torch logs at exit)
            logging.getLogger(name).setLevel(level)
        flux_server.configure(require_token=None)
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    logged = [formatter.format(r) for r in caplog.records]
    assert len(logged) > 10, "hardly any log records captured: the test would prove nothing"
    assert any(r.levelno == logging.DEBUG for r in caplog.records)
    leaks = [t for t in logged + seen if planted in t]
    assert leaks == []


def test_checkpoint_load_is_weights_only_by_default(flux_server, bucket):
    from fluxfs.pipes import FluxCheckpoint

    assert inspect.signature(FluxCheckpoint.load).parameters["weights_only"].default is True

    class Evil:
        def __reduce__(self):
            return (print, ("code ran during load",))

    ckpt = FluxCheckpoint(endpoint_url=flux_server.url, token="anon", skip_instance_cache=True)
    ckpt.save({"payload": Evil()}, f"flux://{bucket}/evil.pt")
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        ckpt.load(f"flux://{bucket}/evil.pt")
