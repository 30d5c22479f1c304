"""Preference accuracy per client, and evaluation on each client's personalized model."""

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.callbacks import Callback

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.evaluation import PersonalizedEvaluation, client_accuracy, preference_accuracy
from lightning_fed.modules import DPOModule
from lightning_fed.modules.perfedavg import PerFedAvgModule
from lightning_fed.strategies.fedamp import FedAMP
from tests.helpers.personal import tiny
from tests.helpers.runs import preference_data


def test_preference_accuracy_is_strict():
    acc = preference_accuracy(torch.tensor([-1.0, -3.0, -2.0]), torch.tensor([-2.0, -1.0, -2.0]))
    assert acc.tolist() == [1.0, 0.0, 0.0]  # a tie is not a win


def test_client_accuracy_reads_mean_and_worst_client():
    record = {"val_clients": {"0": {"pref_acc": 1.0}, "1": {"pref_acc": 0.5}, "2": {"pref_acc": 0.75}}}
    assert client_accuracy(record) == {
        "clients": {0: 1.0, 1: 0.5, 2: 0.75},
        "mean": 0.75,
        "worst": 0.5,
        "worst_client": 1,
    }
    with pytest.raises(ValueError, match="metric 'rouge_l': no per-client values"):
        client_accuracy(record, "rouge_l")


class Probe(Callback):
    """Records the shared state each client is evaluated with."""

    def __init__(self):
        self.seen = {}

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        cid = int(batch["client_id"][0])
        self.seen.setdefault(cid, {k: v.detach().clone() for k, v in pl_module.shared_parameters().items()})


def fit_with_probe(module, strategy, tmp_path, clients_per_round):
    loop = FederatedLoop(rounds=1, clients_per_round=clients_per_round, local_steps=2, strategy=strategy, seed=0)
    probe = Probe()
    trainer = pl.Trainer(
        default_root_dir=str(tmp_path),
        callbacks=[loop, PersonalizedEvaluation(), probe],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, datamodule=preference_data(groups=("positive", "negative"), batch_size=4))
    return loop, probe


def test_fedamp_clients_are_evaluated_on_their_personalized_models(tmp_path):
    loop, probe = fit_with_probe(tiny(DPOModule), FedAMP(), tmp_path, clients_per_round=4)
    for cid, seen in probe.seen.items():
        expected = loop.server.strategy.client_model(cid, loop.server.global_state)
        assert all(torch.equal(seen[k], expected[k]) for k in seen)
    key = next(iter(loop.server.global_state))
    assert not torch.equal(probe.seen[0][key], probe.seen[1][key])
    after = loop.module.shared_parameters()  # the global state is back after evaluation
    assert all(torch.equal(after[k].detach(), v) for k, v in loop.server.global_state.items())


def test_perfedavg_adapts_to_each_client_before_evaluation(tmp_path):
    loop, probe = fit_with_probe(tiny(PerFedAvgModule, inner_lr=0.5), None, tmp_path, clients_per_round=2)
    key = next(k for k in loop.server.global_state if "lora_B" in k)
    assert all(not torch.equal(seen[key], loop.server.global_state[key]) for seen in probe.seen.values())
    assert not torch.equal(probe.seen[0][key], probe.seen[1][key])
    after = loop.module.shared_parameters()
    assert all(torch.equal(after[k].detach(), v) for k, v in loop.server.global_state.items())
