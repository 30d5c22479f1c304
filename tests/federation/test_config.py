"""FederationConfig: every problem named by its YAML key, all at once; the loop holds one."""

import pytest

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.run_config import FederationConfig


def test_problems_are_named_together():
    with pytest.raises(ValueError) as info:
        FederationConfig(rounds=0, local_steps=None, min_clients=3, max_update_norm=-1.0, on_large_update="drop")
    msg = str(info.value)
    for part in (
        "federation.rounds must be in [1, 1000000], got 0",
        "set exactly one of federation.local_steps and federation.local_epochs, got None and None",
        "federation.min_clients must be in [1, clients_per_round=2], got 3",
        "federation.max_update_norm must be > 0 or null, got -1.0",
        "federation.on_large_update must be one of ('reject', 'clip'), got 'drop'",
    ):
        assert part in msg
    assert "\n" not in msg


def test_the_loop_reads_its_settings_from_its_config():
    loop = FederatedLoop(rounds=3, clients_per_round=2, local_steps=None, local_epochs=2, seed=7, eval_every=2)
    assert loop.run.config == FederationConfig(rounds=3, local_steps=None, local_epochs=2, seed=7, eval_every=2)
    assert (loop.run.rounds, loop.run.local_steps, loop.run.local_epochs) == (3, None, 2)
    assert (loop.server.rounds, loop.server.clients_per_round, loop.server.seed) == (3, 2, 7)
    assert loop.evaluator.evaluation.every == 2 and loop.run.to_dict()["eval_every"] == 2
    with pytest.raises(AttributeError):
        loop.run.rounds = 4  # one place: a config is replaced, not edited through the loop
