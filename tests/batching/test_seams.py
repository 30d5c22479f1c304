"""Batching reaches the module and the turns only through declared seams (issue 42 item 4).

- the module's contract: ``training_step`` returns ``per_client_loss`` (one reduction for a
  sequential and a batched step) and ``FederatedModule.batchable`` declares it, inherited;
- the driver's clipping seam (``TurnDriver.clip_gradients``) instead of a replaced
  ``configure_gradient_clipping``; ``ClientTurn.train_on`` instead of a write to its private state;
  nothing is set on the module from outside.
"""

from __future__ import annotations

import ast
from pathlib import Path

import torch

from lightning_fed.batching.fallback import batching_fallback
from lightning_fed.callbacks import FederatedLoop
from lightning_fed.modules import BackboneConfig, DPOModule, LoraSettings
from lightning_fed.modules.losses import dpo_loss, preference_metrics
from tests.batching.test_parity import NO_DROPOUT, sft_data, sft_module
from tests.helpers.runs import fit

BATCHING = Path(__file__).parents[2] / "lightning_fed" / "batching"


def _writes_from_outside(tree: ast.AST) -> list[str]:
    """Attribute writes on anything but ``self``, and ``setattr`` calls, in a module's code."""
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for t in targets:
            if isinstance(t, ast.Attribute) and not (isinstance(t.value, ast.Name) and t.value.id == "self"):
                if t.attr.startswith("_") or t.attr in ("configure_gradient_clipping", "batched_rows"):
                    found.append(f"{ast.unparse(t)} (line {t.lineno})")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            found.append(f"setattr (line {node.lineno})")
    return found


def test_the_batching_package_writes_no_private_state_of_other_objects():
    found = {p.name: w for p in sorted(BATCHING.glob("*.py")) if (w := _writes_from_outside(ast.parse(p.read_text())))}
    assert found == {}


def test_a_batched_round_sets_nothing_on_the_module(tmp_path):
    module = sft_module()
    seen: list[tuple[bool, bool]] = []

    def watch(optimizer) -> None:  # what the module carries at each optimizer step
        stacked = any(p.dim() == 3 for p in module.shared_parameters().values())
        own = "configure_gradient_clipping" in module.__dict__ or hasattr(module, "batched_rows")
        seen.append((stacked, own))

    module.on_before_optimizer_step = watch
    loop = FederatedLoop(rounds=1, clients_per_round=4, local_steps=2, seed=0, batch_clients=4, save_adapter=False)
    fit(module, sft_data(), loop, str(tmp_path), limit_val_batches=0, gradient_clip_val=0.01)
    assert seen and all(stacked for stacked, _ in seen)  # the steps ran batched
    assert not any(own for _, own in seen)


class ConservativeDPO(DPOModule):
    """A subclass that only changes the per-pair loss: it inherits the per-client reduction."""

    def pair_metrics(self, batch):
        chosen, rejected = self.sequence_log_probs(batch)
        ref_chosen, ref_rejected = self.reference_log_probs(batch)
        losses, r_c, r_r = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, self.beta)
        return preference_metrics(0.9 * losses, r_c, r_r, chosen, rejected)


def test_a_subclass_that_changes_only_the_pair_loss_batches():
    module = ConservativeDPO(BackboneConfig(config=dict(NO_DROPOUT), tokenizer="bytes"), lora=LoraSettings(dropout=0.0))
    assert batching_fallback(module, []) is None


def test_one_client_s_step_is_the_plain_mean():
    """The sequential path goes through the same reduction: its loss is the batch mean, bit for bit."""
    module = sft_module()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 200, (3, 12), generator=g)
    labels = ids.clone()
    labels[:, :5] = -100
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    out = module.training_step({**batch, "client_id": torch.full((3,), 2)}, 0)
    scored = module.scored(batch)
    assert torch.equal(out["loss"], scored.nll().mean())
    assert out["client_ids"].tolist() == [2] and torch.equal(out["client_losses"], out["loss"].detach().reshape(1))
