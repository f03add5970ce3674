"""`fluxfs demo` (`make demo`): a whole training job on the embedded server, next to plain gcsfs.

Starts the fluxfs server in a subprocess (cloud profile: 30 ms first byte, 100 MB/s per
request), writes a synthetic 32x32 image dataset, lists it, trains a small CNN for one epoch
streaming through `fluxfs.pipes`, checkpoints with torch.save to a flux:// URL and loads it
back, then prints each stage beside the same stage done with gcsfs. torch is imported only
inside the functions here: `import fluxfs` must never pull it in.
"""
from __future__ import annotations

import argparse
import io
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .base import progress_bar

NUM_CLASSES = 10
IMAGE_SHAPE = (3, 32, 32)
PREFIX = "train/"


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The demo's flags (also used by ``python -m fluxfs.cli.demo``)."""
    g = parser.add_argument_group("demo")
    g.add_argument("--objects", type=int, metavar="N", default=20_000, help="images in the dataset (default 20000)")
    g.add_argument("--checkpoint-mb", type=int, metavar="MB", default=128,
                   help="checkpoint size in MB: the model plus a tensor standing in for a bigger model (default 128)")
    g.add_argument("--gcsfs-samples", type=int, metavar="N", default=500,
                   help="samples the gcsfs training comparison reads (it is slow; default 500)")
    g.add_argument("--batch-size", type=int, metavar="N", default=256, help="images per training batch (default 256)")
    g.add_argument("--workers", type=int, metavar="N", default=2, help="DataLoader worker processes (default 2)")
    g.add_argument("--profile", choices=["cloud", "local"], default="cloud",
                   help="embedded server profile (default cloud: 30 ms first byte, 100 MB/s per request)")
    g.add_argument("--small", action="store_true",
                   help="a quick run: 2000 objects, 16 MB checkpoint, 200 gcsfs samples")
    g.add_argument("--no-gcsfs", action="store_true", help="skip the gcsfs comparison")
    g.add_argument("--seed", type=int, metavar="N", default=0,
                   help="seed of the dataset, the shuffling and the model (default 0)")
    return parser


@dataclass
class Stage:
    """One row of the final table: what fluxfs achieved, and gcsfs at the same stage."""

    name: str
    unit: str
    fluxfs: float
    gcsfs: Optional[float] = None
    note: str = ""
    seconds: Optional[float] = None  # fluxfs's wall time for the stage


@dataclass
class Report:
    stages: List[Stage] = field(default_factory=list)
    checks: Dict[str, bool] = field(default_factory=dict)

    def table(self) -> str:
        rows = [("stage", "fluxfs", "(time)", "gcsfs", "fluxfs/gcsfs", "")]
        for s in self.stages:
            ratio = f"{s.fluxfs / s.gcsfs:.1f}x" if s.gcsfs else "-"
            rows.append((s.name, f"{s.fluxfs:,.0f} {s.unit}", "" if s.seconds is None else f"{s.seconds:.1f} s",
                         "-" if s.gcsfs is None else f"{s.gcsfs:,.0f} {s.unit}", ratio, s.note))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = []
        for k, r in enumerate(rows):
            lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                         + (f"  {r[5]}" if r[5] else ""))
            if k == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)


# -- the dataset ----------------------------------------------------------------------------

def make_images(count: int, seed: int):
    """`count` learnable synthetic images (uint8, 3x32x32) and labels: each class has its own colour and stripes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, size=count)
    palette = rng.integers(40, 216, size=(NUM_CLASSES, 3, 1, 1))
    yy, xx = np.mgrid[0:32, 0:32]
    stripes = np.stack([np.sin((xx * np.cos(a) + yy * np.sin(a)) * (0.3 + 0.05 * c))
                        for c, a in enumerate(np.linspace(0, np.pi, NUM_CLASSES, endpoint=False))])
    images = palette[labels] + 40 * stripes[labels][:, None] + rng.normal(0, 25, size=(count, *IMAGE_SHAPE))
    return np.clip(images, 0, 255).astype(np.uint8), labels


def object_key(i: int, label: int) -> str:
    return f"{PREFIX}class{label}/{i:06d}.npy"


def encode(image) -> bytes:
    """One image as .npy bytes (a 128-byte header plus the pixels)."""
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, image, allow_pickle=False)
    return buf.getvalue()


def decode(data: bytes, meta: Any):
    """The dataset transform: .npy bytes -> (float tensor in [0, 1], label from the key's class directory)."""
    import numpy as np
    import torch

    image = np.load(io.BytesIO(data), allow_pickle=False)
    key = meta if isinstance(meta, str) else meta.key
    label = int(key.split("/")[-2][len("class"):])
    return torch.from_numpy(image).float().div_(255), label


class GcsfsImages:
    """What a user writes with plain gcsfs: a map-style Dataset doing one `cat_file` per sample."""

    def __init__(self, paths: List[str], endpoint: str):
        self.paths, self.endpoint = paths, endpoint
        self._fs = None

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        if self._fs is None:  # one filesystem per worker process
            from gcsfs.core import GCSFileSystem

            self._fs = GCSFileSystem(endpoint_url=self.endpoint, token="anon", skip_instance_cache=True)
        return decode(self._fs.cat_file(self.paths[i]), self.paths[i])

    def __getstate__(self):
        return {"paths": self.paths, "endpoint": self.endpoint, "_fs": None}


def make_model():
    import torch.nn as nn

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, NUM_CLASSES),
    )


def train_epoch(loader, total: int, desc: str, args: argparse.Namespace, seed: int):
    """One epoch of SGD over `loader`; returns (samples, seconds, accuracy over the epoch, model, optimizer).

    Its progress bar shows as every fluxfs bar does (`progress_bar`): on a terminal, or with --progress.
    """
    import torch

    torch.manual_seed(seed)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    seen = correct = 0
    t0 = time.perf_counter()
    with progress_bar(args, total=total, desc=desc, unit=" img") as bar:
        for x, y in loader:
            opt.zero_grad()
            out = model(x)
            loss = loss_fn(out, y)
            loss.backward()
            opt.step()
            seen += len(y)
            correct += int((out.argmax(1) == y).sum())
            bar.update(len(y))
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    return seen, time.perf_counter() - t0, correct / max(seen, 1), model, opt


# -- the job --------------------------------------------------------------------------------

def _say(args, text: str) -> None:
    if not getattr(args, "quiet", False):
        print(text, file=sys.stderr, flush=True)


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run(args: argparse.Namespace) -> int:
    """Run the demo; returns 0 when every check passed (counts, bytes, checkpoint tensors)."""
    if args.small:
        args.objects = min(args.objects, 2_000)
        args.checkpoint_mb = min(args.checkpoint_mb, 16)
        args.gcsfs_samples = min(args.gcsfs_samples, 200)
    if args.objects < NUM_CLASSES:
        raise ValueError(f"--objects must be at least {NUM_CLASSES}")
    from fluxfs.server import run as run_server

    endpoint = getattr(args, "endpoint", None)
    if endpoint:
        _say(args, f"using the server at {endpoint}")
        return _job(args, endpoint, tidy=True)
    _say(args, f"starting the embedded server (profile {args.profile}) ...")
    with run_server(in_process=False, profile=args.profile) as srv:
        _say(args, f"server at {srv.url}")
        return _job(args, srv.url, tidy=False)  # the in-memory server and its bucket go away with it


def _job(args: argparse.Namespace, endpoint: str, tidy: bool) -> int:
    import fsspec
    import torch
    from gcsfs.core import GCSFileSystem
    from torch.utils.data import DataLoader

    from fluxfs.core import FluxFileSystem
    from fluxfs.pipes import FluxMapDataset

    started = time.perf_counter()
    so = {"endpoint_url": endpoint, "token": "anon"}
    fs = FluxFileSystem(skip_instance_cache=True, **so)
    gfs = GCSFileSystem(endpoint_url=endpoint, token="anon", skip_instance_cache=True)
    bucket = f"fluxfs-demo-{uuid.uuid4().hex[:8]}"
    fs.mkdir(bucket)
    report = Report()
    try:
        # 1. write the dataset: batched, parallel uploads
        images, labels = make_images(args.objects, args.seed)
        keys = [object_key(i, int(c)) for i, c in enumerate(labels)]
        t0 = time.perf_counter()
        chunk = 2_000
        with progress_bar(args, total=len(keys), desc="writing dataset", unit=" obj") as bar:
            for start in range(0, len(keys), chunk):
                part = {f"{bucket}/{k}": encode(images[i]) for i, k in enumerate(keys[start:start + chunk], start)}
                fs.pipe(part)
                bar.update(len(part))
        dt = time.perf_counter() - t0
        report.stages.append(Stage(f"write {len(keys):,} images", "obj/s", len(keys) / dt, seconds=dt))

        # 2. list it: the parallel lister against gcsfs's page-by-page listing
        listed, dt = _timed(lambda: fs.find(f"{bucket}/{PREFIX}"))
        report.checks["fluxfs listing complete"] = sorted(listed) == sorted(f"{bucket}/{k}" for k in keys)
        g_listed, g_dt = _timed(lambda: gfs.find(f"{bucket}/{PREFIX}"))
        report.checks["gcsfs listing complete"] = len(g_listed) == len(keys)
        report.stages.append(Stage(f"list {len(keys):,} objects", "obj/s", len(listed) / dt, len(g_listed) / g_dt,
                                   seconds=dt))
        _say(args, f"listed {len(listed):,} objects in {dt:.2f} s (gcsfs: {g_dt:.2f} s)")

        # 3. train one epoch through fluxfs.pipes (one DataLoader batch = one batched read)
        url = f"flux://{bucket}/{PREFIX}"
        dataset = FluxMapDataset.from_prefix(url, transform=decode, storage_options=so)
        loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                            generator=torch.Generator().manual_seed(args.seed))
        n, dt, acc, model, opt = train_epoch(loader, len(dataset), "training (fluxfs)", args, args.seed)
        report.checks["every image trained on once"] = n == len(keys)
        _say(args, f"trained on {n:,} images in {dt:.1f} s, accuracy over the epoch {acc:.0%}")
        g_rate = None
        if not args.no_gcsfs:
            sub = sorted(g_listed)[: args.gcsfs_samples]
            g_loader = DataLoader(GcsfsImages(sub, endpoint), batch_size=args.batch_size, shuffle=True,
                                  num_workers=args.workers, generator=torch.Generator().manual_seed(args.seed))
            g_n, g_dt, _, _, _ = train_epoch(g_loader, len(sub), "training (gcsfs)", args, args.seed)
            g_rate = g_n / g_dt
        report.stages.append(Stage("train 1 epoch", "img/s", n / dt, g_rate,
                                   "" if g_rate is None else f"gcsfs timed on {len(sub):,} images", seconds=dt))

        # 4. checkpoint: torch.save straight to a flux:// URL (parallel multipart upload), load it back
        extra = torch.randn(max(args.checkpoint_mb, 1) * 2**20 // 4, generator=torch.Generator().manual_seed(1))
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "big_weights": extra}
        nbytes = sum(t.numel() * t.element_size() for t in _tensors(state))
        mb = nbytes / 1e6
        ckpt = f"flux://{bucket}/checkpoints/epoch1.pt"

        def save(opener, target):
            with opener(target, "wb") as f:
                torch.save(state, f)

        def load(opener, target):
            with opener(target, "rb") as f:
                return torch.load(f, weights_only=True)

        flux_open = lambda u, mode: fsspec.open(u, mode, **so)  # noqa: E731 - the URL is all the user types
        _, dt_save = _timed(lambda: save(flux_open, ckpt))
        loaded, dt_load = _timed(lambda: load(flux_open, ckpt))
        report.checks["checkpoint tensors equal"] = _equal(state, loaded)
        g_save = g_load = None
        if not args.no_gcsfs:
            gpath = f"{bucket}/checkpoints/epoch1-gcsfs.pt"
            _, g_dt_save = _timed(lambda: save(gfs.open, gpath))
            g_loaded, g_dt_load = _timed(lambda: load(gfs.open, gpath))
            report.checks["gcsfs checkpoint tensors equal"] = _equal(state, g_loaded)
            g_save, g_load = mb / g_dt_save, mb / g_dt_load
        report.stages.append(Stage(f"save checkpoint ({mb:,.0f} MB)", "MB/s", mb / dt_save, g_save, seconds=dt_save))
        report.stages.append(Stage(f"load checkpoint ({mb:,.0f} MB)", "MB/s", mb / dt_load, g_load, seconds=dt_load))
    finally:
        if tidy:
            _remove_bucket(fs, bucket, args)

    print(f"\nfluxfs demo: server profile {args.profile}, {args.objects:,} images, batch {args.batch_size}, "
          f"{args.workers} workers; whole job {time.perf_counter() - started:.0f} s\n")
    print(report.table())
    print()
    for name, ok in report.checks.items():
        print(f"  [{'ok' if ok else 'FAILED'}] {name}")
    return 0 if all(report.checks.values()) else 1


def _remove_bucket(fs, bucket: str, args: argparse.Namespace) -> None:
    """Delete the demo's objects (32 at a time: gcsfs deletes 5 at a time on emulators) and its bucket."""
    from concurrent.futures import ThreadPoolExecutor

    try:
        names = fs.find(bucket)
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(fs.rm_file, names))
        fs.rmdir(bucket)
    except Exception as exc:  # the demo's result matters more than tidying up
        _say(args, f"(could not remove demo bucket {bucket}: {exc})")


def _tensors(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def _equal(a, b) -> bool:
    """Same structure, and every tensor equal bit for bit."""
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fluxfs.cli.demo", description=__doc__.splitlines()[0])
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars or messages, only the table")
    parser.add_argument("--progress", action="store_true",
                        help="progress bars even when stderr is not a terminal (by default only on a terminal)")
    parser.add_argument("--endpoint", default=None, help="use this server instead of starting one")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
