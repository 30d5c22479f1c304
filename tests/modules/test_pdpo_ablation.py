"""FedPDPO's ablations (paper Table 3) on harder planted data: which orderings hold here.

Paper, Table 3 (IMDB, 10 clients): (A3) full FedPDPO 85.23 > (A1) w/o bottleneck 82.44 >
(A2) w/o reward head 81.94. On the easy planted set (``synthetic:preferences``) every variant
reaches ~99%, so nothing can order. ``synthetic:hard_preferences`` with ``distractor=1``
(every pair also differs in the property the client does *not* care about, on a random
side) keeps the per-client models off the ceiling for a short run.

Measured with exactly this setting (4 clients, 2 opposite tastes, 96 pairs per client of which
24 held out, 3 rounds x 6 local steps of batch 4, lr 2e-3, tiny GPT-2 from a config), mean
per-client preference accuracy (%), seeds 0 / 1 / 2, with the bottleneck as it is now (Eq. 9
over the pre-norm residual stream with a copy of the backbone's final norm: the base model at
initialisation; see ``modules/bottleneck.py``):

=====================  ====  ====  ====
variant                 s0    s1    s2
=====================  ====  ====  ====
full FedPDPO (A3)      95.8  86.5  94.8
w/o bottleneck (A1)    94.8  87.5  92.7
w/o reward head (A2)   92.7  87.5  91.7
=====================  ====  ====  ====

(With the earlier bottleneck, a fresh LayerNorm on top of the normalised output, full was
96.9 / 89.6 / 94.8 and A2 92.7 / 88.5 / 93.8; A1 does not use the bottleneck and is unchanged.)

What holds and what does not:

* full vs A1 (the bottleneck helps): +1 / -1 / +2 held-out pairs of 96, so +2 pairs of 288
  over the three seeds: at most a small help, within seed noise. Asserted below as measured
  (slow test): full ahead on the three seeds together, and never behind by more than one pair.
  In a neighbouring setting (lr 1e-3, 8 local steps, earlier bottleneck) the order held in 2
  of 4 seeds and reversed in one. Not the paper's +2.8 points.
* full > A2 (the reward head helps): +3.1 / -1.0 / +3.1 here (earlier bottleneck: +4.2 / +1.0
  / +1.0), but A2 >= full in the neighbouring setting in 2 of 4 seeds (a tie and +3.1), and on
  the noisier variant (purity 0.9, label noise 0.1, 128 pairs, 4 rounds x 8 steps) A2 was ahead
  or tied in every seed (+0.8 / 0 / +1.5; both with the earlier bottleneck). Within noise: not
  asserted.
* A1 >= A2 (the paper's middle order): +2.1 / 0 / +1.0 now (mixed with the earlier
  bottleneck). Three seeds, one-pair margins: not asserted.

Why the reward head shows so little here: preference accuracy reads the LM head only, and
the explicit term changes its training only by reweighting the DPO gradient
(``sigma(-beta * Delta)``) and by the reward head's gradient into the bottleneck/LoRA; and
Eq. (7)'s ``s`` starts near 0 (at initialisation ``Delta_ir`` is ~0) and moves with
momentum 0.95, so in a few dozen local steps the explicit term is still small.
"""

import tempfile

import lightning.pytorch as pl
import pytest

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.datamodules import PreferenceDataModule
from lightning_fed.evaluation import client_accuracy
from lightning_fed.modules.pdpo import PDPOModule
from lightning_fed.strategies import FedAvg
from tests.helpers.personal import tiny_kwargs
from tests.helpers.threads import one_thread  # noqa: F401 (autouse)

HARD = {"num_clients": 4, "examples_per_client": 96, "groups": ["positive", "negative"], "distractor": 1.0}


def mean_accuracy(seed: int, **variant) -> float:
    pl.seed_everything(seed, verbose=False)
    module = PDPOModule(
        **tiny_kwargs(lr=2e-3),
        bottleneck_dim=16,
        reward_hidden=32,
        bottleneck_dropout=0.0,
        reward_dropout=0.0,
        **variant,
    )
    data = PreferenceDataModule(
        dataset="synthetic:hard_preferences",
        num_clients=4,
        synthetic_args={**HARD, "seed": seed},
        batch_size=4,
        eval_batch_size=4,
        max_length=160,
        val_fraction=0.25,
        seed=seed,
    )
    loop = FederatedLoop(rounds=3, clients_per_round=4, local_steps=6, strategy=FedAvg(), seed=seed)
    with tempfile.TemporaryDirectory() as root:
        trainer = pl.Trainer(
            default_root_dir=root,
            callbacks=[loop],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            num_sanity_val_steps=0,
        )
        trainer.fit(module, datamodule=data)
    return client_accuracy(loop.server.report.history[-1])["mean"]


@pytest.mark.slow  # six federated runs, ~1 min
def test_bottleneck_ablation_orders_as_in_table3():
    """(A3) full > (A1) w/o bottleneck over seeds 0-2 together, never behind by more than one pair."""
    full = [mean_accuracy(seed) for seed in (0, 1, 2)]
    without_bottleneck = [mean_accuracy(seed, use_bottleneck=False) for seed in (0, 1, 2)]
    assert sum(full) >= sum(without_bottleneck) + 1 / 96, (full, without_bottleneck)
    assert all(f >= a - 1 / 96 - 1e-9 for f, a in zip(full, without_bottleneck)), (full, without_bottleneck)
    assert min(full) >= 0.85, full  # learnt, and off the ceiling that hid the ablations
