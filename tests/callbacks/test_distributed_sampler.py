"""Lightning's DistributedSampler stays out of the round loader through public settings only.

The round loader splits each global batch over the DDP processes itself
(``RoundBatchSampler``), so Lightning must not inject a ``DistributedSampler``. The CLI builds
the Trainer with ``use_distributed_sampler=False`` (a ``trainer_defaults`` value) and refuses
``True`` in one line, before anything is written; neither ``FederatedLoop`` nor the Flower client sets Lightning's
private ``trainer._accelerator_connector`` (issue 23).
"""

from __future__ import annotations

from lightning_fed.federated_cli import run_cli
from tests.helpers.cli import ROOT, lightning_fed


def test_cli_trainer_default_is_no_distributed_sampler(tmp_path):
    cli = run_cli(["--config", str(ROOT / "configs/tiny.yaml"), f"--trainer.default_root_dir={tmp_path}"], run=False)
    assert cli.config["trainer"]["use_distributed_sampler"] is False
    assert not any(tmp_path.iterdir())  # building the objects writes nothing


def test_cli_refuses_use_distributed_sampler_true_in_one_line(tmp_path):
    proc = lightning_fed(
        "fit",
        "--config",
        str(ROOT / "configs/tiny.yaml"),
        f"--trainer.default_root_dir={tmp_path / 'run'}",
        "--trainer.use_distributed_sampler=true",
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.splitlines()[0] == (
        "error: trainer.use_distributed_sampler must be false (the round loader splits each batch over the"
        " DDP processes itself), got True"
    )
    assert not (tmp_path / "run").exists()


def test_no_module_touches_lightnings_private_connector():
    touching = [p.name for p in (ROOT / "lightning_fed").rglob("*.py") if "._accelerator_connector" in p.read_text()]
    assert touching == []
