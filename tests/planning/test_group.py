"""A group of K clients trained together: the plan item by item, the largest K, and a measured peak."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_fed.planning.activations import count_saved_activations
from lightning_fed.planning.estimate import PlanInputs, estimate, model_shape
from lightning_fed.planning.group import (
    SAFETY,
    batched_group_size,
    estimate_group,
    inputs_from_module,
    memory_budget,
    run_group_size,
)
from tests.planning.tiny_llama import TINY

ROOT = Path(__file__).resolve().parents[2]


def test_group_plan_item_by_item():
    """The backbone and the runtime once; adapters, gradients, moments K times; activations of K x batch."""
    shape = model_shape({"config": TINY})
    p = PlanInputs(batch_size=3, max_length=5, lora_r=2, objective="dpo", runtime_bytes=100)
    one = estimate(shape, p)
    group = estimate_group(shape, p, 4)
    assert group.items["weights"] == one.items["weights"] and group.items["runtime"] == 100
    for name in ("lora", "lora_grads", "optimizer"):
        assert group.items[name] == 4 * one.items[name] > 0
    # 4 clients x 3 pairs = 24 sequences (chosen and rejected) of 5 tokens in one forward, no dropout
    # (DPO), through the batching engine's layers (each target keeps its regrouped input)
    saved = count_saved_activations(shape.config, 24, 5, lora_r=2, clients=4, row_copies=2)
    # plus the shared-prefix attention probabilities: 12 pairs x 2 heads x W^2 (W = 2 x 5) x 2 layers, float32
    assert group.items["activations"] == saved.total + 4 * 12 * 2 * 10 * 10 * 2
    assert group.items["activations"] > count_saved_activations(shape.config, 24, 5, lora_r=2).total
    assert group.items["logits"] == 2 * 24 * 5 * 10 * 4
    assert estimate_group(shape, p, 1).items == one.items
    pdpo = PlanInputs(**{**p.__dict__, "objective": "pdpo", "bottleneck_dim": 4, "reward_hidden": 3})
    assert estimate_group(shape, pdpo, 3).items["personal"] == 3 * estimate(shape, pdpo).items["personal"] > 0
    with pytest.raises(ValueError, match="federation.batch_clients: a group has at least 1 client, got 0"):
        estimate_group(shape, p, 0)


def test_batched_group_size_is_the_largest_k_that_fits():
    shape = model_shape({"config": TINY})
    p = PlanInputs(batch_size=3, max_length=5, lora_r=2, objective="sft", runtime_bytes=1000)
    totals = {k: estimate_group(shape, p, k).total for k in range(1, 12)}
    assert all(totals[k] < totals[k + 1] for k in range(1, 11))
    # A budget whose safe share holds K = 7 but not K = 8.
    budget = (totals[7] + totals[8]) / 2 / SAFETY
    assert batched_group_size(shape, p, clients_per_round=11, budget_bytes=budget) == 7
    assert batched_group_size(shape, p, clients_per_round=5, budget_bytes=budget) == 5  # never above the round
    assert batched_group_size(shape, p, clients_per_round=11, budget_bytes=totals[7] / SAFETY) == 7
    assert batched_group_size(shape, p, clients_per_round=11, budget_bytes=1) == 1  # one client: sequential turns
    assert batched_group_size(shape, p, 11, budget_bytes=totals[11], safety=1.0) == 11
    # The same from the backbone section and from the transformers config.
    assert batched_group_size({"config": TINY}, p, 11, budget_bytes=budget) == 7
    assert batched_group_size(shape.config, p, 11, budget_bytes=budget) == 7
    with pytest.raises(ValueError, match="clients_per_round must be >= 1, got 0"):
        batched_group_size(shape, p, 0, budget_bytes=budget)


def test_auto_group_size_of_a_built_run(monkeypatch):
    """``batch_clients: auto`` on a built module and data module: their settings, the device's budget."""
    from tests.helpers.runs import preference_data, tiny_dpo

    module, data = tiny_dpo(r=4), preference_data(batch_size=4, max_length=160)
    shape, p = inputs_from_module(module, data)
    assert (shape.model_type, shape.layers, shape.hidden, shape.vocab) == ("gpt2", 2, 32, 259)
    assert (p.batch_size, p.max_length, p.lora_r, p.objective, p.dtype, p.optimizer) == (
        4,
        160,
        4,
        "dpo",
        "float32",
        "adamw",
    )
    assert p.disable_dropout is True  # DPOModule's default: counted without dropout
    totals = {k: estimate_group(shape, p, k).total for k in (3, 4)}
    budget = (totals[3] + totals[4]) / 2 / SAFETY
    monkeypatch.setattr("lightning_fed.planning.group.memory_budget", lambda device: budget)
    assert run_group_size(module, data, None, clients_per_round=10) == 3
    assert run_group_size(module, data, None, clients_per_round=2) == 2


def test_cpu_budget_is_available_memory_plus_this_process():
    with open("/proc/meminfo") as f:
        total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert rss < memory_budget("cpu") <= total
    with pytest.raises(ValueError, match="auto sizes groups on cpu or cuda, not on 'meta'"):
        memory_budget("meta")


def test_group_estimate_within_25_percent_of_measured_peak_tiny():
    """K = 1, 4, 16 clients of the tiny GPT-2 (configs/tiny.yaml: DPO, 4 pairs x 160 tokens, LoRA r=4),
    one group step each in one child process (benchmarks/batched_clients.py --memory: ru_maxrss
    with MALLOC_MMAP_THRESHOLD_=65536, the planner benchmark's live peak).

    Since DPO pairs run as one row with a block mask (modules/shared_prefix.py), the plan counts
    the attention probabilities the math SDPA path keeps (planning.estimate.shared_prefix_scores):
    without that term the peak grew 288 MiB from K=1 to K=16 against 197 MiB planned (0.68, this
    test failed). Measured with it on 2026-11-29: plan / peak 0.85 (K=1), 0.86 (K=4), 0.90 (K=16),
    growth 282 MiB planned against 275 MiB (1.02).

    The margin: the issue's 25% on the whole peak. Measured on 2026-11-27 (before the shared prefix; 2 shared cores; the
    figures repeat to the MiB from run to run: memory, unlike time, does not depend on the load),
    through the batching engine's usual step (stacked adapters, each client's rows together):
    plan / peak 0.85 (K=1), 0.84 (K=4), 0.84 (K=16). The peak of the tiny model is mostly the process (Python, torch,
    transformers: ~500 MiB against the plan's 512 MiB runtime), so the growth with K is checked as
    well: from K=1 to K=16 the plan grows 188 MiB and the measured peak 233 MiB (0.81). The
    unplanned part is vocabulary-sized float32 temporaries of the DPO loss and of the reference
    forward (128 sequences x 160 tokens x 259), large next to a 32-wide model.
    """
    cmd = [sys.executable, "benchmarks/batched_clients.py", "--model", "tiny", "--memory", "--clients", "1", "4", "16"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True, env={**os.environ}).stdout
    rows = {r["clients"]: r for r in json.loads(out.strip().splitlines()[-1])}
    assert sorted(rows) == [1, 4, 16]
    for row in rows.values():
        assert abs(row["ratio"] - 1) <= 0.25, row
    grown = rows[16]["peak_rss"] - rows[1]["peak_rss"]
    planned = rows[16]["estimate"] - rows[1]["estimate"]
    assert grown > 100 * 2**20, rows  # the activations of 16 x the batch, not noise
    assert abs(planned / grown - 1) <= 0.25, (planned, grown)


@pytest.mark.slow  # ~3 minutes of CPU: SmolLM2-135M, one DPO step of 1, 4 and 16 clients
def test_group_estimate_within_25_percent_of_measured_peak_smollm2():
    """SmolLM2-135M-Instruct, 1 pair x 64 tokens per client, LoRA r=8, through the batching engine
    (benchmarks/batched_clients.py --model smollm2 --memory). On 2026-11-27 the plan / measured
    live peak was 0.91 (K=1), 0.96 (K=4), 1.00 (K=16); see benchmarks/RESULTS.md (issue 36)."""
    cmd = [sys.executable, "benchmarks/batched_clients.py", "--model", "smollm2", "--memory"]
    cmd += ["--clients", "1", "4", "16"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True, env={**os.environ}).stdout
    rows = {r["clients"]: r for r in json.loads(out.strip().splitlines()[-1])}
    assert rows[16]["peak_rss"] > 3e9, rows  # sixteen clients' activations, not an empty child
    for row in rows.values():
        assert abs(row["ratio"] - 1) <= 0.25, row


def test_auto_through_the_loop_with_the_planner(monkeypatch, tmp_path):
    """``batch_clients: auto`` in a real fit is sized by :func:`run_group_size`: 4 clients a round,
    a budget that holds 3."""
    from lightning_fed.callbacks import FederatedLoop
    from lightning_fed.strategies import FedAvg
    from tests.helpers.runs import fit, preference_data, tiny_dpo

    module, data = tiny_dpo(r=4), preference_data(num_clients=4, batch_size=4, max_length=160)
    shape, p = inputs_from_module(module, data)
    totals = {k: estimate_group(shape, p, k).total for k in (3, 4)}
    monkeypatch.setattr(
        "lightning_fed.planning.group.memory_budget", lambda device: (totals[3] + totals[4]) / 2 / SAFETY
    )
    loop = FederatedLoop(
        rounds=1,
        clients_per_round=4,
        local_steps=2,
        strategy=FedAvg(),
        seed=0,
        save_adapter=False,
        batch_clients="auto",
    )
    fit(module, data, loop, str(tmp_path), accelerator="cpu", limit_val_batches=0)
    assert loop.group_size == 3
    assert len(loop.server.report.history) == 1


def test_auto_on_a_cpu_stops_at_the_cap(monkeypatch):
    """On a CPU ``auto`` takes at most ``CPU_GROUP_CAP`` clients however much memory there is (issue 43:
    the gain of a group stops there); the planner's own K is not capped."""
    from lightning_fed.planning.group import CPU_GROUP_CAP
    from tests.helpers.runs import preference_data, tiny_dpo

    module, data = tiny_dpo(r=4), preference_data(batch_size=4, max_length=160)
    monkeypatch.setattr("lightning_fed.planning.group.memory_budget", lambda device: 1 << 50)
    shape, p = inputs_from_module(module, data)
    assert batched_group_size(shape, p, 16, budget_bytes=1 << 50) == 16
    assert run_group_size(module, data, None, clients_per_round=16) == CPU_GROUP_CAP == 4
