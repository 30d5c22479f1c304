"""HeldOutRouge: periodic evaluations on a seeded subset, the last one on the full held-out set."""

import json
from types import SimpleNamespace

import pytest

from lightning_fed.evaluation import heldout
from lightning_fed.evaluation.heldout import HeldOutRouge


@pytest.mark.parametrize(("final_full", "final_count"), [(True, 7), (False, 3)])
def test_final_round_uses_the_full_held_out_set(tmp_path, monkeypatch, final_full, final_count):
    path = tmp_path / "held_out.jsonl"
    path.write_text("\n".join(json.dumps({"instruction": f"Say {i}.", "output": str(i)}) for i in range(7)))  # 7 rows
    seen = []

    def fake_rouge(module, examples, template, max_new_tokens, batch_size, system_prompt):
        seen.append(len(examples))  # stands in for generation; only the example count matters here
        return {"rougeL": 0.0}, ["" for _ in examples]

    monkeypatch.setattr(heldout, "evaluate_rouge", fake_rouge)
    hook = HeldOutRouge(dataset=str(path), split="train", max_examples=3, every_n_rounds=2, final_full=final_full)
    server = SimpleNamespace(rounds=5, datamodule=SimpleNamespace(template="plain"))
    for round_idx in range(5):
        hook.after_aggregate(server, None, None, round_idx)
    # rounds 2 and 4 (every 2nd) on the 3-example subset; round 5, the last, on all 7 (or the subset)
    assert seen == [3, 3, final_count]
    assert [(r["round"], r["num_examples"]) for r in hook.history] == [(2, 3), (4, 3), (5, final_count)]
