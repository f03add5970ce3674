"""Lightning's default logger (CSVLogger) with default_root_dir on flux://: metrics.csv is appended to."""
from __future__ import annotations

import csv
import io

import fsspec
import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.loggers import CSVLogger  # noqa: E402


class LoggingModel(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)


def test_default_csv_logger_on_flux(flux_server, bucket, monkeypatch):
    # Lightning opens the log through fsspec with no options: point flux:// at the test server as a user would.
    monkeypatch.setitem(fsspec.config.conf, "flux", {"endpoint_url": flux_server.url, "token": "anon"})
    root = f"flux://{bucket}/run"
    trainer = pl.Trainer(accelerator="cpu", max_steps=6, log_every_n_steps=1, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=root)
    assert isinstance(trainer.logger, CSVLogger)  # the default when tensorboard is not installed
    flux_server.reset_stats()
    trainer.fit(LoggingModel())

    # Every logged step saves the CSV: written once ("w"), then appended to ("a") for each later step.
    assert flux_server.stats()["requests"].get("compose", 0) >= 5
    with fsspec.open(f"{root}/lightning_logs/version_0/metrics.csv", "r") as f:
        rows = list(csv.DictReader(io.StringIO(f.read())))
    assert [int(r["step"]) for r in rows] == [0, 1, 2, 3, 4, 5]
    assert all(float(r["train_loss"]) >= 0 for r in rows)
    names = flux_server.list_names(bucket, "run/")
    assert "run/lightning_logs/version_0/metrics.csv" in names
    assert any(n.startswith("run/lightning_logs/version_0/checkpoints/") for n in names)
    assert flux_server.list_names(bucket, "_fluxfs-tmp/") == []
