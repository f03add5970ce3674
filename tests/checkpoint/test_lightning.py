"""FluxCheckpointIO in a real Lightning Trainer: fit -> checkpoints on flux:// -> resume."""
from __future__ import annotations

import fsspec
import pytest
import torch

pl = pytest.importorskip("lightning.pytorch")
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402
from lightning.pytorch.plugins.io import AsyncCheckpointIO  # noqa: E402

from fluxfs.pipes.checkpoint import FluxCheckpoint  # noqa: E402
from fluxfs.pipes.lightning import FluxCheckpointIO  # noqa: E402


class TinyModel(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.started_at_step = None

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def on_train_start(self):
        self.started_at_step = self.trainer.global_step

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.9)}

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 4, generator=g)
        data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
        return torch.utils.data.DataLoader(data, batch_size=8)


def trainer(max_steps, io, dirpath, tmp_path):
    return pl.Trainer(
        accelerator="cpu", max_steps=max_steps, enable_progress_bar=False, logger=False,
        enable_model_summary=False, default_root_dir=str(tmp_path), plugins=[io],
        callbacks=[ModelCheckpoint(dirpath=dirpath, every_n_train_steps=2, save_top_k=1, monitor="step",
                                   mode="max")],
    )


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_fit_checkpoint_resume(flux_server, bucket, tmp_path, monkeypatch, use_async):
    # ModelCheckpoint lists and creates its directory through fsspec with no options: point the
    # flux protocol at the test server the way a user would (FSSPEC_FLUX_* / fsspec config).
    monkeypatch.setitem(fsspec.config.conf, "flux", {"endpoint_url": flux_server.url, "token": "anon"})
    dirpath = f"flux://{bucket}/run1"

    def make_io():
        if use_async:  # storage options from fsspec's config, like ModelCheckpoint's
            return AsyncCheckpointIO(FluxCheckpointIO())
        return FluxCheckpointIO(endpoint_url=flux_server.url, token="anon")

    model = TinyModel()
    trainer(6, make_io(), dirpath, tmp_path).fit(model)
    names = flux_server.list_names(bucket, "run1/")
    # save_top_k=1: the step-2 and step-4 checkpoints were removed through remove_checkpoint.
    assert names == ["run1/epoch=0-step=6.ckpt"], names

    ckpt = FluxCheckpoint(endpoint_url=flux_server.url, token="anon").load(f"{dirpath}/epoch=0-step=6.ckpt")
    assert ckpt["global_step"] == 6
    for k, v in model.state_dict().items():
        assert torch.equal(ckpt["state_dict"][k], v)

    resumed = TinyModel()
    trainer(10, make_io(), dirpath, tmp_path).fit(resumed, ckpt_path=f"{dirpath}/epoch=0-step=6.ckpt")
    assert resumed.started_at_step == 6
    assert resumed.trainer.global_step == 10
    assert flux_server.list_names(bucket, "run1/") == ["run1/epoch=1-step=10.ckpt"]  # 8 steps an epoch


def test_local_checkpoints_when_the_trainer_root_is_local(flux_server, tmp_path):
    """A FluxCheckpointIO kept in the plugins while the run writes to a local directory: saved, pruned and
    resumed there, as Lightning's own TorchCheckpointIO would (the bucket is never asked)."""
    dirpath = tmp_path / "ckpts"
    io = FluxCheckpointIO(endpoint_url=flux_server.url, token="anon")
    model = TinyModel()
    trainer(6, io, str(dirpath), tmp_path).fit(model)
    assert sorted(p.name for p in dirpath.iterdir()) == ["epoch=0-step=6.ckpt"]  # steps 2 and 4 removed
    ckpt = io.load_checkpoint(dirpath / "epoch=0-step=6.ckpt")
    assert ckpt["global_step"] == 6 and all(torch.equal(ckpt["state_dict"][k], v)
                                            for k, v in model.state_dict().items())
    resumed = TinyModel()
    trainer(10, FluxCheckpointIO(endpoint_url=flux_server.url, token="anon"), str(dirpath), tmp_path).fit(
        resumed, ckpt_path=str(dirpath / "epoch=0-step=6.ckpt"))
    assert resumed.started_at_step == 6
    # Lightning keeps the checkpoint a run resumed from when it is local.
    assert sorted(p.name for p in dirpath.iterdir()) == ["epoch=0-step=6.ckpt", "epoch=1-step=10.ckpt"]
