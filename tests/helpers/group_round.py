"""One round of four clients trained one after another and as one group (K = 4), their uploads compared."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def grouped_round_matches_sequential(
    tmp_path: Path, make_module: Callable[[bool], Any], rtol: float, after_sequential: Callable[[], None] = lambda: None
) -> None:
    """Train one round (4 clients of 12 pairs, batch 2, ``max_length`` 160) with ``make_module(False)``
    one client after another, then with ``make_module(True)`` as one group of 4; every client's LoRA
    tensors must agree within ``rtol`` (largest relative difference). ``after_sequential`` runs
    between the two (e.g. to check the new path was not taken by the sequential round)."""
    from tests.batching.test_parity import run_round
    from tests.helpers.runs import preference_data
    from tests.helpers.sgd_steps import largest_relative_difference

    def data():
        return preference_data(num_clients=4, per_client=12, batch_size=2, max_length=160)

    old, _ = run_round(tmp_path, "old", lambda: make_module(False), data, "off")
    after_sequential()
    new, loop = run_round(tmp_path, "new", lambda: make_module(True), data, 4)
    assert loop.group_size == 4 and old.keys() == new.keys()
    for key in old:
        state_old = {n: v for n, v in old[key].items() if "lora_" in n}
        state_new = {n: v for n, v in new[key].items() if "lora_" in n}
        assert state_old and largest_relative_difference(state_new, state_old) <= rtol
