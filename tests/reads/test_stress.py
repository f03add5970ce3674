"""Multi-process stress of batched reads: readers in forked, spawned and forkserver processes (two
threads each, like a prefetching DataLoader worker) run `cat_objects` / `cat` over overlapping sets
of objects while another process overwrites them with other sizes. Every payload returned must be
exactly one written version, checked by content (each version names its key and number and has its
own size), never a mix or a misaligned slice; the reserved prefix is empty afterwards.
"""
from __future__ import annotations

import multiprocessing as mp
import random
import threading
import time
import traceback

N_OBJECTS = 200
N_VOLATILE = 8     # keys the writer also deletes and recreates: FileNotFoundError is allowed for these
ROUNDS = 4         # overwrite rounds of the writer
PREFIX = "s/"


def payload(key: str, version: int) -> bytes:
    """Version `version` of `key`: a header naming both, then seeded bytes; the size changes per version."""
    rnd = random.Random(f"{key}#{version}")
    return f"{key}@{version};".encode() + rnd.randbytes(rnd.randint(0, 3000))


def check(path: str, body: bytes) -> int:
    """The version `body` is, or AssertionError unless it is exactly one written version of `path`."""
    key = path.split("/", 1)[1]
    head, sep, _ = body.partition(b";")
    name, _, ver = head.decode("utf-8", "replace").rpartition("@")
    assert sep and name == key and ver.isdigit(), f"{path}: bytes of another object or misaligned: {body[:40]!r}"
    version = int(ver)
    assert 0 <= version <= ROUNDS and body == payload(key, version), f"{path}: not exactly version {ver}"
    return version


def _fs(url: str, **options):
    from fluxfs import FluxFileSystem

    # Small composites too (cap 16 KiB): more groups, more boundaries that could misalign.
    return FluxFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True, multipart="resumable",
                          max_composite_size=16_384, retry={"default": {"initial": 0.01, "maximum": 0.2}},
                          **options)


def writer(url: str, bucket: str, done) -> None:
    """Overwrite a third of the objects per round with a new version (other sizes); delete and recreate a few."""
    fs = _fs(url)
    rnd = random.Random(99)
    keys = [f"{PREFIX}k{i:04d}" for i in range(N_OBJECTS)]
    try:
        for version in range(1, ROUNDS + 1):
            chosen = rnd.sample(keys, N_OBJECTS // 3)
            fs.pipe({f"{bucket}/{k}": payload(k, version) for k in chosen})
            volatile = [f"{bucket}/{k}" for k in keys[:N_VOLATILE] if rnd.random() < 0.5]
            if volatile:
                fs.rm(volatile)
                time.sleep(0.05)
                fs.pipe({p: payload(p.split("/", 1)[1], version) for p in volatile})
            time.sleep(0.15)
    finally:
        done.set()


def reader(fs_or_url, bucket: str, seed: int, ready, done, results) -> None:
    """Two threads of batched reads until the writer is done (and two rounds more); report counts or the failure."""
    from fluxfs.errors import ObjectChanged

    try:
        fs = _fs(fs_or_url) if isinstance(fs_or_url, str) else fs_or_url
        stale = list(fs.find(f"{bucket}/{PREFIX}", detail=True).values())  # listed once: goes stale
        ready.put(seed)
        volatile = {f"{bucket}/{PREFIX}k{i:04d}" for i in range(N_VOLATILE)}
        counts = {"checked": 0, "newer": 0, "from_stale_listing": 0, "batches": 0}
        lock = threading.Lock()
        errors: list[str] = []

        def verify(out: dict, infos: list[dict]) -> None:
            sizes = {i["name"]: i["size"] for i in infos if "size" in i}
            names = {i["name"] if isinstance(i, dict) else i for i in infos}
            assert set(out) == names, f"results for {len(out)} paths, asked {len(names)}"
            n = newer = off = 0
            for path, body in out.items():
                if isinstance(body, ObjectChanged) and path in sizes:
                    off += 1  # cat_objects reads the listed generation: overwritten or deleted since
                    continue
                if isinstance(body, FileNotFoundError) and path in volatile:
                    continue
                assert isinstance(body, bytes), f"{path}: {body!r}"
                newer += check(path, body) > 0
                off += path in sizes and sizes[path] != len(body)
                n += 1
            with lock:
                counts["checked"] += n
                counts["newer"] += newer
                counts["from_stale_listing"] += off
                counts["batches"] += 1

        def work(thread_seed: int) -> None:
            rnd = random.Random(thread_seed)
            after = 0
            try:
                while after < 2:
                    if done.is_set():
                        after += 1
                    kind = rnd.random()
                    if kind < 0.5:  # the stale listing, overlapping subsets, duplicates
                        infos = rnd.sample(stale, rnd.randint(50, len(stale)))
                        infos += rnd.sample(infos, 10)
                        verify(fs.cat_objects(infos, on_error="return"), infos)
                    elif kind < 0.75:  # a fresh listing
                        infos = list(fs.find(f"{bucket}/{PREFIX}", detail=True).values())
                        verify(fs.cat_objects(infos, on_error="return"), infos)
                    else:  # plain paths, metadata from the listing cache (filled by an earlier find)
                        paths = sorted({i["name"] for i in rnd.sample(stale, 120)})
                        verify(fs.cat(paths, on_error="return"), [{"name": p} for p in paths])
            except BaseException:  # reported to the test
                errors.append(traceback.format_exc())

        threads = [threading.Thread(target=work, args=(seed * 10 + t,)) for t in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        results.put((seed, errors[0] if errors else None, counts))
    except BaseException:
        ready.put(seed)  # failed before listing: do not keep the test waiting for it
        results.put((seed, traceback.format_exc(), {}))


def test_concurrent_processes_never_see_mixed_or_misaligned_bytes(flux_server, bucket):
    url = flux_server.url
    fs = _fs(url)
    fs.pipe({f"{bucket}/{PREFIX}k{i:04d}": payload(f"{PREFIX}k{i:04d}", 0) for i in range(N_OBJECTS)})
    # Use the filesystem (its loop, session and job id) before forking: the forked reader inherits it.
    infos = list(fs.find(f"{bucket}/{PREFIX}", detail=True).values())
    assert all(check(p, b) == 0 for p, b in fs.cat_objects(infos).items())

    fork, spawn, forkserver = (mp.get_context(m) for m in ("fork", "spawn", "forkserver"))
    done = spawn.Event()
    ready, results = spawn.Queue(), spawn.Queue()
    procs = [spawn.Process(target=reader, args=(url, bucket, 2, ready, done, results)),
             forkserver.Process(target=reader, args=(url, bucket, 3, ready, done, results)),
             fork.Process(target=reader, args=(fs, bucket, 1, ready, done, results))]
    for p in procs:
        p.start()
    w = fork.Process(target=writer, args=(url, bucket, done))
    reports = {}
    try:
        for _ in procs:  # every reader holds its listing before the first overwrite
            ready.get(timeout=60)
        w.start()
        for _ in procs:
            seed, error, counts = results.get(timeout=60)
            assert error is None, f"reader {seed} failed:\n{error}"
            reports[seed] = counts
    finally:
        done.set()
        for p in procs + [w]:
            if p.pid is None:
                continue
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert w.exitcode == 0 and all(p.exitcode == 0 for p in procs)
    for seed, counts in reports.items():
        # The stress happened: each reader checked many payloads, saw overwritten versions, and
        # read listed generations overwritten since (ObjectChanged: the precondition/fallback paths).
        assert counts["batches"] >= 4 and counts["checked"] > 500, (seed, counts)
        assert counts["newer"] > 0 and counts["from_stale_listing"] > 0, (seed, counts)
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []
    # And what is there now is exactly one version of every object.
    final = fs.cat(sorted(fs.find(f"{bucket}/{PREFIX}")))
    assert len(final) == N_OBJECTS and all(check(p, b) >= 0 for p, b in final.items())
