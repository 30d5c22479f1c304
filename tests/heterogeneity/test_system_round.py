"""System heterogeneity in the loop: the virtual clock picks who trains and for how many steps."""

import pytest

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.federation import RoundHook, sample_clients
from lightning_fed.heterogeneity import SyncRoundSimulator, SystemHeterogeneity, profiles_from_distribution
from lightning_fed.heterogeneity.system_round import instructed_steps
from tests.helpers.runs import fit, preference_data, tiny_dpo


def test_instructed_steps_is_the_fewest_asked_capped_by_the_run():
    assert instructed_steps({}, 5) == 5
    assert instructed_steps({0: {"local_steps": 2}, 1: {"other": 1}, 2: {"local_steps": 3}}, 5) == 2
    assert instructed_steps({0: {"local_steps": 9}}, 5) == 5
    assert instructed_steps({0: {"local_steps": 2}}, None) is None  # local_epochs: not cut


class StepRecorder(RoundHook):
    def __init__(self):
        self.steps = {}

    def on_client_end(self, turn, trainer, module, update):
        self.steps[(turn.round_idx, turn.client_id)] = turn.steps


def test_the_loop_trains_the_reporters_for_the_steps_they_finished(tmp_path):
    """4 clients, half of them 10x slower (10 s a step vs 1 s), 20% dropout, 3 selected; the round
    closes at 2 reports or at the 12 s deadline, where a slow client has finished floor(12/10)=1
    of its 3 steps and sends that (partial work)."""
    args = {"local_steps": 3, "slow_fraction": 0.5, "deadline": 12.0, "partial_work": True, "target": 2}
    hook, recorder = SystemHeterogeneity(**args, dropout=0.2), StepRecorder()
    loop = FederatedLoop(rounds=3, clients_per_round=3, local_steps=3, seed=0, hooks=[hook, recorder])
    fit(tiny_dpo(), preference_data(), loop, str(tmp_path))
    # the same outcome from the simulator alone (a pure function of seed, round, client)
    sim = SyncRoundSimulator(profiles_from_distribution(4, slow_fraction=0.5, dropout=0.2), 3, 12.0, 0.0, True, 1, 0)
    clock, counts, partial = 0.0, {"unavailable": 0, "dropped": 0, "late": 0, "partial": 0}, 0
    for record in loop.server.report.history:
        r = record["round"] - 1
        outcome = sim.run_round(r, sample_clients(4, 3, 0, r), 2, start=clock)
        clock = outcome.end
        assert record["clients"] == sorted(rep.client for rep in outcome.reports) == record["aggregated"]
        for rep in outcome.reports:
            assert recorder.steps[(r, rep.client)] == rep.steps
            partial += rep.partial
        for key in ("unavailable", "dropped", "late"):
            counts[key] += len(getattr(outcome, key))
    counts["partial"] = partial
    assert partial >= 1 and counts["dropped"] + counts["late"] >= 1  # the test is not trivial
    assert loop.server.hook_summaries()["SystemHeterogeneity"] == {"virtual_time": clock, **counts}


def test_target_above_the_selected_is_one_line_error(tmp_path):
    loop = FederatedLoop(rounds=1, clients_per_round=2, local_steps=1, seed=0, hooks=[SystemHeterogeneity(target=3)])
    with pytest.raises(ValueError) as info:
        fit(tiny_dpo(), preference_data(), loop, str(tmp_path))
    assert str(info.value) == (
        "federation.hooks: SystemHeterogeneity.target=3 exceeds federation.clients_per_round=2 (the selected)"
    )


def test_a_round_with_too_few_reports_fails_naming_why(tmp_path):
    """Clients almost never online (availability 0.01; 0 is refused up front): round 1 fails before an
    empty round is laid out."""
    hook = SystemHeterogeneity(local_steps=1, availability=0.01)
    loop = FederatedLoop(rounds=1, clients_per_round=2, local_steps=1, seed=0, hooks=[hook], isolate_failures=True)
    with pytest.raises(RuntimeError) as info:
        fit(tiny_dpo(), preference_data(), loop, str(tmp_path))
    clients = sample_clients(4, 2, 0, 0)
    assert str(info.value) == (
        f"round 1: only 0 of 2 selected clients reported in time, fewer than federation.min_clients=1"
        f" (unavailable: {sorted(clients)}, dropped: [], late: [])"
    )


def test_target_below_min_clients_is_one_line_error(tmp_path):
    """A round closes at its ``target``-th report: below ``min_clients`` every round fails (red team B11)."""
    hook = SystemHeterogeneity(target=2)
    loop = FederatedLoop(rounds=1, clients_per_round=3, min_clients=3, local_steps=1, seed=0, hooks=[hook])
    with pytest.raises(ValueError) as info:
        fit(tiny_dpo(), preference_data(), loop, str(tmp_path))
    assert str(info.value) == (
        "federation.hooks: SystemHeterogeneity.target=2 is below federation.min_clients=3: a round closes at its"
        " target-th report, so every round would fail"
    )
    assert list(tmp_path.iterdir()) == []
