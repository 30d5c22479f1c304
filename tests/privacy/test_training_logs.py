"""A private run writes no client's training figure through Lightning's logging (``self.log``)."""

import math

from lightning_fed.modules.dpo import DPOModule
from tests.helpers.flower_sim import run_in_process
from tests.privacy.test_in_run import _private_config, _written_numbers


class RawTraining:
    """Records the per-batch training loss and reward margin each client's module computed (what its
    ``training_step`` hands to ``self.log``). Accuracies are left out (fractions such as 0.5 also occur
    in any config), and so is log(2): DPO's loss while the policy still equals the reference, which
    the round means of the report share."""

    def __init__(self, monkeypatch):
        self.values = []
        pair_metrics = DPOModule.pair_metrics

        def record(module, batch):
            metrics = pair_metrics(module, batch)
            if module.trainer.training:
                for name in ("loss", "reward_margin"):
                    value = float(metrics[name].detach().float().mean())
                    if value != 0.0 and not math.isclose(value, math.log(2), rel_tol=1e-6):
                        self.values.append(value)
            return metrics

        monkeypatch.setattr(DPOModule, "pair_metrics", record)


def _leaks(run, raw):
    written = _written_numbers(run)
    assert any(p.name.startswith("events.out.tfevents") for p, _ in written), "no TensorBoard events checked"
    assert any(p.suffix == ".ckpt" for p, _ in written), "no checkpoint checked"
    return [(p.name, x) for p, x in written if any(math.isclose(x, v, rel_tol=1e-6) for v in raw)]


LOGGING = ["--trainer.logger=true", "--trainer.enable_checkpointing=true", "--trainer.log_every_n_steps=1"]


def test_a_private_run_logs_no_client_training_loss(tmp_path, monkeypatch):
    """2 rounds x 2 clients x 2 local steps, a TensorBoard logger at every step: no loss or reward
    margin a client's module computed in training is in the events, checkpoints or reports."""
    raw = RawTraining(monkeypatch)
    loop = run_in_process(_private_config(tmp_path), tmp_path / "run", LOGGING)
    assert loop.server.privacy.enabled
    assert len(raw.values) >= 8  # at least the losses of the 8 local steps after the first ones
    assert not _leaks(tmp_path / "run", raw.values)


def test_without_privacy_the_training_logs_reach_tensorboard(tmp_path, monkeypatch):
    """The same run without DP logs the clients' training losses (the test above can fail)."""
    import yaml

    cfg = yaml.safe_load(open(_private_config(tmp_path)).read())
    fed = cfg["federation"]
    fed.pop("privacy")
    fed["strategy"] = {"class_path": "lightning_fed.strategies.FedAvg"}
    path = tmp_path / "open.yaml"
    path.write_text(yaml.safe_dump(cfg))
    raw = RawTraining(monkeypatch)
    loop = run_in_process(str(path), tmp_path / "run", LOGGING)
    assert not loop.server.privacy.enabled
    assert {n for n, _ in _leaks(tmp_path / "run", raw.values)} >= {
        n.name for n in (tmp_path / "run").rglob("events.out.tfevents*")
    }
