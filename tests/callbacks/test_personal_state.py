"""Personal parameters stay on their client: swapped in for training and evaluation only."""

import lightning.pytorch as pl
import torch

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.modules import DPOModule, is_adapter_param
from tests.helpers.runs import fit, preference_data, tiny_dpo


class FedPerDPO(DPOModule):
    """FedPer-style: the LoRA of the last GPT-2 block stays on each client."""

    def is_personal(self, name: str) -> bool:
        return is_adapter_param(name) and ".h.1." in name


def test_personal_state_never_travels_and_is_used_for_evaluation(tmp_path):
    base = tiny_dpo()
    module = FedPerDPO(base.hparams.backbone, lora=base.hparams.lora, lr=base.hparams.lr, beta=0.5)
    # Two opposite groups: personal layers are what lets each client fit its own taste.
    data = preference_data(groups=("positive", "negative"))
    loop = FederatedLoop(rounds=3, clients_per_round=4, local_steps=4, seed=0)
    fit(module, data, loop, str(tmp_path))

    personal_keys = set(module.personal_parameters())
    assert personal_keys and personal_keys.isdisjoint(loop.server.global_state)
    states = {cid: loop.store.get(cid)["personal"] for cid in range(4)}
    assert all(set(s) == personal_keys for s in states.values())
    key = next(iter(personal_keys))
    assert not torch.equal(states[0][key], states[1][key])  # each client has its own
    # Uploads are the shared keys only.
    shared_bytes = sum(v.numel() * v.element_size() for v in loop.server.global_state.values())
    assert loop.server.report.history[-1]["up_bytes"] == 4 * shared_bytes
    # Evaluation swaps each client's personal state in: opposite groups are both served.
    per_client = loop.server.report.history[-1]["val_clients"]
    assert min(m["reward_acc"] for m in per_client.values()) > 0.5


class _StopInsideATurn(pl.Callback):
    """Requests a stop after the 2nd of a client's 4 batches: Lightning then validates after that batch
    (``_should_check_val_fx`` on ``trainer.should_stop``), inside the client's turn, before the epoch ends."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.current_epoch == 1 and batch_idx == 1:
            trainer.should_stop = True


class _PersonalAcrossValidation(pl.Callback):
    """Records a training client's personal parameters when a validation starts inside its turn, and
    again when it ends (after the loop's ``on_validation_end``, this callback coming after the loop): they
    must be equal."""

    def __init__(self, loop: FederatedLoop) -> None:
        self.loop, self.before, self.pairs = loop, None, []

    def on_validation_start(self, trainer, pl_module):
        if self.loop.turn is not None:  # inside a client's turn (batch_clients 1)
            self.before = {k: v.detach().clone() for k, v in pl_module.personal_parameters().items()}

    def on_validation_end(self, trainer, pl_module):
        if self.before is not None:
            self.pairs.append(
                (self.before, {k: v.detach().clone() for k, v in pl_module.personal_parameters().items()})
            )
            self.before = None


def test_a_validation_inside_a_client_s_turn_keeps_its_personal_parameters(tmp_path):
    """A validation inside a turn (clients one after another): it swaps each validated client's personal
    state in (LoopEvaluation._load_client); on a8354b9 the training client then went on with the last
    validated client's personal parameters (its own in-flight ones lost). Now they are kept aside for the
    validation (its own batches scored with them) and put back. ``trainer.val_check_interval`` inside a
    round is refused (lightning_fed/loop_conflicts.py); Lightning still validates inside a round when a
    stop is requested there (an EarlyStopping on a training metric, a user's callback), as here."""
    base = tiny_dpo()
    module = FedPerDPO(base.hparams.backbone, lora=base.hparams.lora, lr=base.hparams.lr, beta=0.5)
    data = preference_data(groups=("positive", "negative"))
    loop = FederatedLoop(rounds=2, clients_per_round=2, local_steps=4, seed=0, batch_clients=1)
    probe = _PersonalAcrossValidation(loop)
    trainer = pl.Trainer(
        default_root_dir=str(tmp_path),
        callbacks=[loop, _StopInsideATurn(), probe],
        enable_model_summary=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
        logger=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, datamodule=data)
    assert len(probe.pairs) == 1  # the validation inside round 2's first turn happened
    for before, after in probe.pairs:
        assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
