"""The example-level federation and privacy plan of ``benchmarks/privacy_audit.py`` (``--model smollm2``)."""

import argparse
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from privacy_audit import build_federation, plan_example_privacy  # noqa: E402


def test_example_unit_puts_each_included_canary_once_round_robin_and_no_excluded_one():
    fed = build_federation(seed=0, canaries=16, fillers=0, repeats=1, filler_rows_per_client=3, clients=2)
    included = [c for c in fed["canaries"] if c["included"]]
    assert 0 < len(included) < 16
    for k, c in enumerate(included):
        rows = [r for r in fed["rows"] if c["code"] in r["output"] and c["name"] in r["instruction"]]
        assert rows == [{**rows[0], "user": f"client{k % 2}"}]  # exactly one row, dealt round-robin
    for c in fed["canaries"]:
        if not c["included"]:
            assert not any(c["name"] in r["instruction"] for r in fed["rows"])
    fillers = [r for r in fed["rows"] if r["instruction"].startswith("Reverse")]
    assert sorted(r["user"] for r in fillers) == ["client0"] * 3 + ["client1"] * 3
    assert len(fed["rows"]) == len(included) + 6


def test_client_unit_each_canary_its_own_client_with_repeats_and_n_independent_of_the_coins():
    """An excluded canary's client holds ordinary rows, so N (and ClientLevelDP's m = N) is the
    same whichever canaries are included (issue 32: m depended on the coins)."""
    sizes = set()
    for seed in range(4):
        fed = build_federation(seed=seed, canaries=8, fillers=2, repeats=3, filler_rows_per_client=2)
        included = [c for c in fed["canaries"] if c["included"]]
        assert 0 < len(included) < 8 or seed > 0
        assert len(fed["rows"]) == 3 * 8 + 2 * 2
        users = {r["user"] for r in fed["rows"]}
        assert users == {c["user"] for c in fed["canaries"]} | {"filler000", "filler001"}
        for c in fed["canaries"]:
            holds = any(c["code"] in r["output"] for r in fed["rows"] if r["user"] == c["user"])
            assert holds == c["included"]
        sizes.add(len(users))
    assert sizes == {10}


def test_example_plan_spends_the_target_and_no_amplification_spends_more():
    # smallest client 20 rows, batch 4: rate 0.2; 4 rounds x 5 steps = 20 steps; each example in
    # at most ceil(5 * 4 / 20) = 1 batch per round: 4 uses without amplification
    rows = [{"user": "client0"}] * 20 + [{"user": "client1"}] * 21
    args = argparse.Namespace(rounds=4, local_steps=5, batch_size=4, delta=1e-5, clip_norm=1.0)
    z, plan = plan_example_privacy(8.0, rows, args)
    assert plan["sample_rate"] == pytest.approx(0.2) and plan["steps"] == 20 and plan["uses_per_example"] == 4
    assert plan["epsilon"] <= 8.0 and plan["epsilon"] == pytest.approx(8.0, abs=0.1)
    assert plan["epsilon_no_amplification"] > plan["epsilon"]
    assert plan_example_privacy(math.inf, rows, args) == (0.0, None)


def test_shared_prefix_scoring_equals_the_full_forward():
    import torch
    from privacy_audit import LORA_TARGETS, TINY, canary_answer, canary_prompt, response_nll, response_nll_shared_prefix

    from lightning_fed.modules import BackboneConfig, LoraSettings, SFTModule

    torch.manual_seed(0)
    module = SFTModule(
        BackboneConfig(config=dict(TINY), tokenizer="bytes"),
        lora=LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=list(LORA_TARGETS)),
    )
    for p in module.parameters():
        if p.requires_grad:
            torch.nn.init.normal_(p, std=0.05)  # a LoRA that changes the output
    answers = [canary_answer(code) for code in ("123456", "000000", "987650")]
    full = response_nll(module, canary_prompt("abcd"), answers)
    cached = response_nll_shared_prefix(module, canary_prompt("abcd"), answers)
    assert cached == pytest.approx(full, abs=1e-4)
    assert len(set(round(x, 3) for x in full)) == 3  # the answers differ, so the check can fail
