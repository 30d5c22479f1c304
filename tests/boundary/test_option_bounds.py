"""Every option is bounded where it is declared, and every cross-option check runs when the run
is bound (issue 34, items 4 and 5): each case below is ``lightning-fed fit`` as a process, exit
2 with exactly one ``error:`` line and the hint, and nothing written (no run folder).

Before: ``lr``/``beta``/``lora.alpha`` of 1e300 exited 1 inside the optimizer or after a round of
non-finite updates; a billion clients or examples per client exited 1 with a ``MemoryError``;
``rounds``/``local_steps`` of 1e12 ran until killed; a straggler ``dropout: 1.0`` failed at
round 1; and the hook checks (ClientRanks above ``r_max``, a stragglers ``target`` above the
clients of a round, AsyncArrivals' ``concurrency`` or strategy) exited 2 only after
``summary.json``, ``config.yaml`` and the events file were written.
"""

from __future__ import annotations

import pytest

from lightning_fed.errors import HINT
from tests.helpers.cli import lightning_fed

HOOKS = {
    "ranks_above_r_max": """
federation:
  strategy: {class_path: lightning_fed.strategies.HetLoRA}
  hooks:
    - {class_path: lightning_fed.heterogeneity.ClientRanks, init_args: {choices: [16], seed: 0}}
""",
    "straggler_target_above_clients_per_round": """
federation:
  hooks:
    - {class_path: lightning_fed.heterogeneity.SystemHeterogeneity, init_args: {local_steps: 1, target: 3}}
""",
    "straggler_dropout_one": """
federation:
  hooks:
    - {class_path: lightning_fed.heterogeneity.SystemHeterogeneity, init_args: {local_steps: 1, dropout: 1.0}}
""",
    "async_concurrency_above_clients": """
federation:
  strategy: {class_path: lightning_fed.strategies.FedBuff, init_args: {buffer_size: 2}}
  hooks:
    - {class_path: lightning_fed.heterogeneity.AsyncArrivals, init_args: {concurrency: 100, local_steps: 1}}
""",
    "async_with_fedavg": """
federation:
  hooks:
    - {class_path: lightning_fed.heterogeneity.AsyncArrivals, init_args: {concurrency: 2, local_steps: 1}}
""",
    "dp_around_fedbuff_with_async": """
federation:
  sampling: poisson
  sampling_rate: 0.5
  clients_per_round: 1
  privacy: {target_epsilon: 40.0}
  strategy:
    class_path: lightning_fed.privacy.ClientLevelDP
    init_args:
      strategy: {class_path: lightning_fed.strategies.FedBuff, init_args: {buffer_size: 2}}
      clip_norm: 0.05
  hooks:
    - {class_path: lightning_fed.heterogeneity.AsyncArrivals, init_args: {concurrency: 2, local_steps: 1}}
""",
}

# name -> (overrides, or a HOOKS entry's name; the error line)
CASES = {
    # ------------------------------------------------------------------ item 4: huge values
    "lr_1e300": (["--model.init_args.lr=1e300"], "error: model.lr must be in (0, 10.0], got 1e+300"),
    "beta_1e300": (["--model.init_args.beta=1e300"], "error: model.beta must be in (0, 1000.0], got 1e+300"),
    "lora_alpha_1e300": (
        ["--model.init_args.lora.alpha=1e300"],
        "error: model.lora.alpha must be in (0, 1000000.0], got 1e+300",
    ),
    "a_billion_clients": (
        ["--data.init_args.num_clients=1000000000"],
        "error: data.num_clients must be in [1, 1000000], got 1000000000",
    ),
    "a_billion_examples_per_client": (
        ["--data.init_args.synthetic_args.examples_per_client=1000000000"],
        "error: data.num_clients=4 x data.synthetic_args.examples_per_client=1000000000 = 4000000000 rows:"
        " a synthetic set holds at most 1000000 (about 1 KiB each while drawn); use fewer, or a data file",
    ),
    "rounds_1e12": (
        ["--federation.rounds=1000000000000"],
        "error: federation.rounds must be in [1, 1000000], got 1000000000000",
    ),
    "local_steps_1e12": (
        ["--federation.local_steps=1000000000000"],
        "error: federation.local_steps must be in [1, 1000000] or null, got 1000000000000",
    ),
    "straggler_dropout_one": (
        "straggler_dropout_one",
        "error: config '{config}': federation.hooks[0].dropout must be in [0, 1), got 1.0",
    ),
    # ------------------------------------------------- item 5: cross-option checks at bind time
    "ranks_above_r_max": (
        "ranks_above_r_max",
        "error: config '{config}': federation.hooks[0].choices: ranks above the global LoRA rank model.lora.r=4,"
        " got [16]",
    ),
    "straggler_target_above_clients_per_round": (
        "straggler_target_above_clients_per_round",
        "error: config '{config}': federation.hooks[0].target=3 exceeds federation.clients_per_round=2 (the selected)",
    ),
    "async_concurrency_above_clients": (
        "async_concurrency_above_clients",
        "error: config '{config}': federation.hooks[0].concurrency must be in [1, data.num_clients=4], got 100",
    ),
    "async_with_fedavg": (
        "async_with_fedavg",
        "error: config '{config}': federation.hooks[0]: AsyncArrivals needs federation.strategy=FedBuff, got FedAvg",
    ),
    "dp_around_fedbuff_with_async": (
        "dp_around_fedbuff_with_async",
        "error: config '{config}': federation.hooks[0]: AsyncArrivals cannot run under"
        " federation.strategy=ClientLevelDP: its privacy accounting assumes synchronous rounds of sampled clients,"
        " which asynchronous arrivals replace; use FedBuff without ClientLevelDP, or drop AsyncArrivals",
    ),
}


PRECHECKED = {"lr_1e300", "beta_1e300", "lora_alpha_1e300", "a_billion_clients", "a_billion_examples_per_client"}
PRECHECKED |= {"rounds_1e12", "local_steps_1e12"}
PRECHECKED |= {
    "straggler_target_above_clients_per_round",
    "async_with_fedavg",
    "straggler_dropout_one",
    "async_concurrency_above_clients",
    "ranks_above_r_max",
    "dp_around_fedbuff_with_async",
}  # lightning_fed/hook_cross_rules.py
"""Refused by the precheck, from the config's text: one line, no ``--debug`` hint (issue 41)."""
WORDED = {"async_with_fedavg"}
"""Refused by the live classes with the package's own line (a ``UserError``): one line too."""


@pytest.mark.parametrize(("overrides", "line"), list(CASES.values()), ids=list(CASES))
def test_a_bad_value_is_refused_in_one_line_before_anything_is_written(tmp_path, overrides, line, request):
    args = ["fit", "--config", "configs/tiny.yaml", "--federation.rounds=1", "--trainer.enable_progress_bar=false"]
    if isinstance(overrides, str):
        config = tmp_path / "hooks.yaml"
        config.write_text(HOOKS[overrides])
        overrides = ["--config", str(config)]
        line = line.replace("{config}", str(config))  # a precheck line names the file that brought it
    root = tmp_path / "run"
    proc = lightning_fed(*args, *overrides, f"--trainer.default_root_dir={root}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    one_line = request.node.callspec.id in PRECHECKED | WORDED
    assert proc.stderr == (f"{line}\n" if one_line else f"{line}\n{HINT}\n")
    assert not root.exists()
