"""notebooks/explore.ipynb executes top to bottom (nbclient) against the embedded server it starts."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "explore.ipynb"
KERNEL = "fluxfs-test-python"


@pytest.fixture
def kernelspec(tmp_path, monkeypatch):
    """A kernelspec running this very interpreter (the venv's), whatever other kernels are installed."""
    spec = tmp_path / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "fluxfs tests", "language": "python",
    }))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.delenv("FLUXFS_EXPLORE_URL", raising=False)  # the notebook's default: its own server
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    return KERNEL


def test_explore_notebook_runs(kernelspec, tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name=kernelspec, timeout=120,
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    t0 = time.monotonic()
    client.execute()  # raises CellExecutionError, with the cell and traceback, if any cell fails
    elapsed = time.monotonic() - t0

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert "400 objects" in text  # the listing found every object the notebook wrote
    assert "batched / plain:" in text
    assert len(images) >= 3  # histogram + prefixes, samples, read timing
    assert elapsed < 90, f"the notebook should stay quick; took {elapsed:.0f} s"
