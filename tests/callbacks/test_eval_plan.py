"""The per-round evaluation plan: which clients, after which rounds, in packed batches."""

import math

import pytest
import torch

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.datamodules.round_sampler import ClientBatchSampler
from lightning_fed.federation.evaluation_plan import (
    EvaluationPlan,
    evaluation_panel,
    packs_evaluation,
    take_over_validation,
)
from lightning_fed.federation.sampling import sample_clients
from tests.helpers.runs import fit, preference_data, tiny_dpo


class _Server:
    """What the plan reads of a ServerRound: size, seed and its sampling."""

    def __init__(self, num_clients, seed, per_round=3):
        self.num_clients, self.seed, self.per_round = num_clients, seed, per_round

    def sample(self, round_idx):
        return sample_clients(self.num_clients, self.per_round, self.seed, round_idx)


def test_panel_is_a_fixed_function_of_seed():
    panel = evaluation_panel(seed=0, num_clients=100, size=8)
    assert len(panel) == 8 and panel == sorted(set(panel)) and all(0 <= c < 100 for c in panel)
    assert evaluation_panel(0, 100, 8) == panel  # drawn again: the same
    assert evaluation_panel(1, 100, 8) != panel  # another seed: another panel
    assert evaluation_panel(0, 5, 5) == evaluation_panel(0, 5, 9) == [0, 1, 2, 3, 4]  # size >= N: all
    plan = EvaluationPlan("panel", panel_size=8, rounds=5)
    server = _Server(100, seed=0)
    assert [plan.clients_for(server, r) for r in range(5)] == [panel] * 5  # the same every round
    assert plan.clients_for(server, 0, standalone=True) == panel  # set explicitly: validate/test too


def test_default_plan_is_panel_in_fit_and_all_standalone():
    plan, server = EvaluationPlan(rounds=3), _Server(40, seed=3)
    assert plan.clients_for(server, 1) == evaluation_panel(3, 40, 16)
    assert len(plan.clients_for(server, 1)) == 16
    assert plan.clients_for(server, 1, standalone=True) == list(range(40))
    small = _Server(10, seed=3)  # N <= panel size: every client, as before the plan
    assert plan.clients_for(small, 0) == list(range(10))


def test_eval_every_keeps_initial_and_last():
    plan = EvaluationPlan(every=2, rounds=5)
    assert [r for r in range(6) if plan.evaluates(r)] == [0, 2, 4, 5]


def test_trainer_check_val_every_n_epoch_counts_as_eval_every():
    from types import SimpleNamespace

    trainer = SimpleNamespace(check_val_every_n_epoch=2, limit_val_batches=0.5)
    plan, limit = take_over_validation(trainer, EvaluationPlan(rounds=3))
    assert (plan.every, limit, trainer.check_val_every_n_epoch) == (2, 0.5, 1)  # Lightning validates every round
    assert [r for r in range(4) if plan.evaluates(r)] == [0, 2, 3]  # the plan decides, the last round included
    with pytest.raises(ValueError, match="trainer.check_val_every_n_epoch=2 conflicts with federation.eval_every=3"):
        take_over_validation(SimpleNamespace(check_val_every_n_epoch=2), EvaluationPlan(every=3, rounds=3))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"eval_clients": "first"},
            "federation.eval_clients must be one of ('all', 'sampled', 'panel') or null, got 'first'",
        ),
        ({"eval_panel_size": 0}, "federation.eval_panel_size must be >= 1, got 0"),
        ({"eval_every": 0}, "federation.eval_every must be >= 1, got 0"),
    ],
)
def test_bad_options_are_one_line_errors(kwargs, message):
    with pytest.raises(ValueError) as err:
        FederatedLoop(rounds=2, **kwargs)
    assert str(err.value) == message


def test_packing_only_when_every_client_has_the_same_model():
    from lightning_fed.evaluation.personalized import PersonalizedEvaluation

    class PerClient:
        evaluates_per_client = True

    module = object()
    assert packs_evaluation(module, personal=False)
    assert not packs_evaluation(module, personal=True)  # personal state swapped in per batch
    assert not packs_evaluation(PerClient(), personal=False)  # e.g. FedBiscuit's selector per client
    assert not packs_evaluation(module, personal=False, callbacks=[PersonalizedEvaluation()])


def test_packed_sampler_crosses_clients():
    # clients 0 and 2 of sizes [3, 1, 5] (offsets [0, 3, 4]): rows 0-2 and 4-8, 8 rows in all
    packed = ClientBatchSampler([0, 2], [0, 3, 4], [3, 1, 5], batch_size=3, packed=True)
    assert list(packed) == [[0, 1, 2], [4, 5, 6], [7, 8]]
    assert len(packed) == math.ceil(8 / 3) == 3
    assert len(ClientBatchSampler([0, 2], [0, 3, 4], [3, 1, 5], batch_size=3)) == 1 + 2  # one client a batch


def test_packed_equals_unpacked_per_client():
    """The same global model scored on the same rows: packing changes batches, not metrics."""
    module, data = tiny_dpo(), preference_data(num_clients=4, per_client=10, batch_size=3)
    data.tokenizer = module.tokenizer
    data.setup("validate")
    results = {}
    for packed in (False, True):
        data.eval_plan = lambda packed=packed: (list(range(4)), packed)
        loader = data.val_dataloader()
        sums, counts, batches = {}, {}, 0
        module.eval()
        with torch.no_grad():
            for batch in loader:
                batches += 1
                out = module.validation_step(batch, 0)
                for j, cid in enumerate(batch["client_id"].tolist()):
                    counts[cid] = counts.get(cid, 0) + 1
                    sums[cid] = sums.get(cid, 0.0) + out["loss"][j].item()
        results[packed] = ({c: sums[c] / counts[c] for c in sums}, counts, batches)
    val_sizes = [len(c.val_set) for c in data.clients]
    assert val_sizes == [2, 2, 2, 2]  # 25% of 10 rows (rounded) per client
    unpacked, packed = results[False], results[True]
    assert unpacked[2] == 4 and packed[2] == math.ceil(8 / 3) == 3
    assert packed[1] == unpacked[1] == dict(enumerate(val_sizes))
    for cid in range(4):
        assert packed[0][cid] == pytest.approx(unpacked[0][cid], rel=1e-5, abs=1e-6)


def _fit(tmp_path, rounds=3, **loop_kwargs):
    loop = FederatedLoop(rounds=rounds, clients_per_round=2, local_steps=1, seed=0, **loop_kwargs)
    fit(tiny_dpo(), preference_data(num_clients=6, per_client=8), loop, str(tmp_path), num_sanity_val_steps=-1)
    return loop


def test_sampled_every_two_rounds_in_a_fit(tmp_path):
    """``sampled`` evaluates exactly the round's clients; ``eval_every=2`` over 3 rounds evaluates
    after rounds 2 and 3 (plus the initial evaluation, on round 1's clients)."""
    loop = _fit(tmp_path, eval_clients="sampled", eval_every=2)
    history = loop.server.report.history
    assert [r["round"] for r in history if "val" in r] == [2, 3]
    for record in history:
        if "val" in record:
            assert sorted(int(c) for c in record["val_clients"]) == record["clients"]
    assert sorted(int(c) for c in loop.server.report.initial_eval["val_clients"]) == sample_clients(6, 2, 0, 0)
    assert loop.trainer.limit_val_batches == 1.0  # the Trainer's own value restored after fit


def test_flower_server_evaluates_the_same_plan(tmp_path):
    """The Flower server asks the plan's clients (``sampled``: the round's), after rounds 2 and 3 of 3."""
    from lightning_fed.deploy.apps import load_run
    from lightning_fed.deploy.records import CONFIG
    from lightning_fed.deploy.server import FederatedServer
    from tests.deploy.test_server_replies import NUM_CLIENTS, ScriptedGrid, _train_replies, honest_eval

    class LoggingGrid(ScriptedGrid):
        def send_and_receive(self, messages, *, timeout=None):
            messages = list(messages)
            kinds = {m.metadata.message_type for m in messages}
            if kinds == {"evaluate"}:
                self.asked.append(sorted(int(m.content.config_records[CONFIG]["client-id"]) for m in messages))
            return super().send_and_receive(messages, timeout=timeout)

    grid = LoggingGrid(_train_replies(lambda m, h: None), honest_eval)
    grid.asked = []
    overrides = "--federation.rounds=3 --federation.eval_clients=sampled --federation.eval_every=2"
    module, datamodule, run, _ = load_run("configs/tiny.yaml", overrides)
    server = FederatedServer(run, module, datamodule.num_clients, tmp_path / "flower", timeout=5)
    server.start(grid, min_nodes=NUM_CLIENTS)
    per_round = run.clients_per_round
    assert grid.asked == [sample_clients(NUM_CLIENTS, per_round, 0, r) for r in (1, 2)]
