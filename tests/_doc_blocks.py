"""The fenced code blocks of a markdown document, for the tests that run the docs as written
(tests/test_readme.py, tests/test_training_doc.py)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fenced_blocks(doc: Path, lang: str) -> list[str]:
    """Every ```lang block of `doc`, in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```", doc.read_text(encoding="utf-8"), re.S | re.M)


def block_after(doc: Path, marker: str, lang: str) -> str:
    """The first ```lang block after `marker` in `doc` (an assertion naming what the doc lost otherwise)."""
    text = doc.read_text(encoding="utf-8")
    assert marker in text, f"{doc.relative_to(ROOT)} lost its {marker} marker"
    m = re.search(rf"```{lang}\n(.*?)```", text[text.index(marker):], re.S)
    assert m, f"no {lang} block after {marker} in {doc.relative_to(ROOT)}"
    return m.group(1)
