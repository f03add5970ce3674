"""``fluxfs sample-images``: a small labelled image dataset to try fluxfs with (the README's quick tour).

Writes ``DEST/<class>/<n>.jpg``: real JPEG (or PNG) files of coloured shapes, one directory per
class, the layout most image datasets use, to a local directory or a flux:// prefix. Pillow draws
them; it is imported only when the command runs.
"""
from __future__ import annotations

import argparse
import io
import os
import random
import sys
from typing import Dict

from .base import UsageError, is_remote, local_path, remote_path
from .storage import make_fs, require_bucket

CLASSES = ("circle", "cross", "square", "triangle")
SIZE = 64  # pixels per side


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dest", help="a local directory (new or empty) or a flux://BUCKET/PREFIX/")
    p.add_argument("--count", type=int, default=200, metavar="N",
                   help="images in all (default 200, spread over the classes)")
    p.add_argument("--format", choices=("jpeg", "png"), default="jpeg", help="file format (default jpeg)")
    p.add_argument("--seed", type=int, default=0, help="the same seed draws the same images")


def draw(label: str, rng: random.Random):
    """One SIZE x SIZE RGB image of the class's shape, at a random place, size and colour, over noise."""
    from PIL import Image, ImageDraw

    background = tuple(rng.randrange(0, 90) for _ in range(3))
    image = Image.new("RGB", (SIZE, SIZE), background)
    pen = ImageDraw.Draw(image)
    for _ in range(40):  # speckles, so no two images are alike
        x, y = rng.randrange(SIZE), rng.randrange(SIZE)
        pen.point((x, y), fill=tuple(rng.randrange(0, 256) for _ in range(3)))
    colour = tuple(rng.randrange(120, 256) for _ in range(3))
    r = rng.randrange(12, 26)
    cx, cy = rng.randrange(r, SIZE - r), rng.randrange(r, SIZE - r)
    if label == "circle":
        pen.ellipse((cx - r, cy - r, cx + r, cy + r), fill=colour)
    elif label == "square":
        pen.rectangle((cx - r, cy - r, cx + r, cy + r), fill=colour)
    elif label == "triangle":
        pen.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=colour)
    else:  # cross
        w = max(3, r // 3)
        pen.rectangle((cx - r, cy - w, cx + r, cy + w), fill=colour)
        pen.rectangle((cx - w, cy - r, cx + w, cy + r), fill=colour)
    return image


def sample_images(count: int = 200, fmt: str = "jpeg", seed: int = 0) -> Dict[str, bytes]:
    """``{"<class>/<n>.<ext>": encoded image}`` for `count` images, the classes taking turns."""
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise UsageError("sample-images draws with Pillow: pip install pillow (or \"fluxfs[images]\")") from None
    if count < 1:
        raise UsageError(f"--count must be at least 1, not {count}")
    rng = random.Random(seed)
    ext = "jpg" if fmt == "jpeg" else "png"
    out: Dict[str, bytes] = {}
    for i in range(count):
        label = CLASSES[i % len(CLASSES)]
        buf = io.BytesIO()
        draw(label, rng).save(buf, format=fmt.upper(), **({"quality": 90} if fmt == "jpeg" else {}))
        out[f"{label}/{i:05d}.{ext}"] = buf.getvalue()
    return out


def cmd_sample_images(args: argparse.Namespace) -> int:
    """``fluxfs sample-images DEST``: write the sample dataset to a new local directory or a flux:// prefix."""
    if is_remote(args.dest):
        fs = make_fs(args)
        base = remote_path(args.dest).rstrip("/")
        require_bucket(fs, base, args.dest)
        images = sample_images(args.count, args.format, args.seed)
        fs.pipe({f"{base}/{rel}": data for rel, data in images.items()})
    else:
        base = local_path(args.dest)
        if os.path.exists(base) and (not os.path.isdir(base) or os.listdir(base)):
            raise UsageError(f"{base} exists and is not an empty directory: name a new one "
                             "(sample-images never overwrites files)")
        images = sample_images(args.count, args.format, args.seed)
        for rel, data in images.items():
            path = os.path.join(base, *rel.split("/"))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
    if not args.quiet:
        ext = next(iter(images)).rsplit(".", 1)[-1]  # every name has the format's extension
        print(f"wrote {len(images)} {args.format.upper()} images of {len(CLASSES)} classes "
              f"({', '.join(CLASSES)}) as {args.dest.rstrip('/')}/<class>/<n>.{ext}",
              file=sys.stderr)
    return 0
