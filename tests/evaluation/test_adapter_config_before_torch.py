"""``lightning-fed evaluate`` refuses an adapter's ``r`` or ``lora_alpha`` before torch is imported.

Before (issue 41): the ``lora_alpha: 1e300`` refusal (``fit``'s cap, 1e6) came after torch was
imported to read the weights (about 9 s of CPU). The adapter's config is now read first, with
``json`` alone (:mod:`lightning_fed.adapter_config`); each case runs as a process with torch,
Lightning, transformers, PEFT and pandas unimportable, so its exact stderr shows it.
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import heavy_blocked_env, lightning_fed
from tests.helpers.files import assert_unchanged, snapshot

PROG = "error: "


@pytest.mark.parametrize(
    "config, problem",
    [
        ({"r": 4, "lora_alpha": 1e300}, "'lora_alpha' must be in (0, 1000000.0], got 1e+300"),
        ({"r": 4, "lora_alpha": -1}, "'lora_alpha' must be in (0, 1000000.0], got -1"),
        ({"r": 0, "lora_alpha": 8}, "'r' must be a positive integer, got 0"),
    ],
    ids=["alpha_1e300", "alpha_negative", "r_zero"],
)
@pytest.mark.parametrize("how", ["--adapter", "--run"])
def test_a_bad_adapter_config_is_refused_before_torch(tmp_path, config, problem, how):
    run = tmp_path / "run"
    (run / "adapter").mkdir(parents=True)
    config_path = run / "adapter" / "adapter_config.json"
    config_path.write_text(json.dumps({**config, "peft_type": "LORA"}))
    source = ["--model", "distilgpt2", "--adapter", str(run / "adapter")] if how == "--adapter" else ["--run", str(run)]
    before = snapshot(run)
    proc = lightning_fed(
        "evaluate",
        *source,
        "--benchmarks",
        "[lm_eval]",
        "--lm_eval.tasks",
        "[hellaswag]",
        cwd=run,
        env=heavy_blocked_env(tmp_path / "blocked"),
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"{PROG}{how} {str(config_path)!r}: {problem}\n"
    assert_unchanged(before, run)
