"""Heterogeneous LoRA ranks in the round: padding is exact rank-r training, the hook sets the ranks,
the loop sends and receives each client's own rank."""

import pytest
import torch

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.heterogeneity import ClientRanks, alpha_for_rank
from lightning_fed.strategies import FedAvg, FlexLoRA, HetLoRA
from lightning_fed.strategies.lora_factors import lora_pairs, match_rank, state_rank
from tests.helpers.runs import fit, preference_data, tiny_dpo

A, B = "m.lora_A.default.weight", "m.lora_B.default.weight"


def test_match_rank_pads_with_zeros_and_truncates_to_the_like_state():
    low = {A: torch.tensor([[1.0, 2.0]]), B: torch.tensor([[3.0], [4.0]]), "head": torch.ones(2)}
    like = {A: torch.zeros(3, 2), B: torch.zeros(2, 3), "head": torch.zeros(2)}
    padded = match_rank(low, like)
    assert padded[A].tolist() == [[1.0, 2.0], [0.0, 0.0], [0.0, 0.0]]
    assert padded[B].tolist() == [[3.0, 0.0, 0.0], [4.0, 0.0, 0.0]]
    assert padded["head"] is low["head"]
    back = match_rank(padded, low)
    assert back[A].tolist() == [[1.0, 2.0]] and back[B].tolist() == [[3.0], [4.0]]
    assert match_rank(low, low) is low  # nothing differs: the state itself


def test_a_rank_r_client_in_an_r_max_module_trains_exactly_as_a_rank_r_adapter():
    """The module built at r_max=4 (alpha 8) with a zero-padded rank-2 start, and a PEFT module
    built at r=2 with alpha_for_rank(8, 2, 4)=4 (tiny_dpo uses alpha=2r): same scaling 2, same
    AdamW steps on the same batches; the padding stays exactly zero."""
    assert alpha_for_rank(8, 2, 4) == 4
    low, high = tiny_dpo(seed=0, r=2), tiny_dpo(seed=0, r=4)
    torch.manual_seed(1)
    start = {k: torch.randn_like(v) * 0.1 for k, v in low.shared_parameters().items()}  # B != 0: a real start
    low.load_state(start)
    high.load_state(match_rank(start, high.shared_parameters()))
    data = preference_data()
    data.tokenizer = low.tokenizer
    data.setup("fit")
    batches = list(data.client(0).train_dataloader())[:3]
    for module in (low, high):
        opt = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=0.01, weight_decay=0.01)
        for batch in batches:
            opt.zero_grad()
            module.pair_metrics(batch)["loss"].mean().backward()
            opt.step()
    trained_low, trained_high = low.shared_parameters(), high.shared_parameters()
    for a_key, b_key in lora_pairs(trained_high).values():
        assert (
            torch.count_nonzero(trained_high[a_key][2:]) == 0 and torch.count_nonzero(trained_high[b_key][:, 2:]) == 0
        )
    back = match_rank(trained_high, trained_low)
    for k, v in trained_low.items():
        assert not torch.equal(v, start[k]) or "lora_B" in k  # it trained
        torch.testing.assert_close(back[k], v, rtol=1e-4, atol=1e-6)


def _loop(strategy, hook, rounds=2):
    return FederatedLoop(rounds=rounds, clients_per_round=2, local_steps=3, seed=0, strategy=strategy, hooks=[hook])


@pytest.mark.parametrize("strategy", [HetLoRA, FlexLoRA], ids=["hetlora", "flexlora"])
def test_each_client_gets_and_sends_its_own_rank(tmp_path, strategy):
    """Ranks [1, 2, 4, 4] under r_max=4: a client's LoRA bytes scale with its rank both ways."""
    ranks = [1, 2, 4, 4]
    loop = _loop(strategy(), ClientRanks(per_client=ranks))
    fit(tiny_dpo(r=4), preference_data(), loop, str(tmp_path))
    full = sum(4 * v.numel() for v in loop.server.global_state.values())  # float32, all LoRA at rank 4
    for record in loop.server.report.history:
        expected = sum(full * ranks[c] // 4 for c in record["clients"])
        assert record["up_bytes"] == record["down_bytes"] == expected, record["clients"]
        assert record["aggregated"] == record["clients"]
    assert state_rank(loop.server.global_state) == 4 and loop.server.strategy.client_ranks == ranks
    assert loop.server.hook_summaries() == {"ClientRanks": {"clients_per_rank": {"1": 1, "2": 1, "4": 2}}}


def test_client_ranks_needs_a_rank_strategy_and_ranks_up_to_the_global_one(tmp_path):
    """The strategy is refused when the run is bound (nothing written yet); ranks above r_max when
    the strategy is set up (it learns r_max from the global adapter)."""
    with pytest.raises(ValueError) as info:
        fit(tiny_dpo(r=4), preference_data(), _loop(FedAvg(), ClientRanks(per_client=[1, 2, 4, 4])), str(tmp_path))
    assert str(info.value) == (
        "federation.hooks: ClientRanks needs a heterogeneous-rank strategy (HetLoRA, FlexLoRA, FLoRA),"
        " got federation.strategy=FedAvg"
    )
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError) as info:
        fit(tiny_dpo(r=4), preference_data(), _loop(HetLoRA(), ClientRanks(per_client=[1, 8, 4, 4])), str(tmp_path))
    assert str(info.value) == (
        "federation.hooks: ClientRanks.per_client: ranks above the global LoRA rank model.lora.r=4, got [8]"
    )


def test_hetlora_self_pruning_penalises_the_tail_and_prunes_when_the_penalty_falls():
    """Hand values, rank 2, gamma 0.5 (keep 1): the penalty is ||A[1:]|| ||B[:, 1:]|| = 2 * 3 = 6."""
    from lightning_fed.strategies.hetlora import PENALTY_KEY, RANK_KEY

    start = {A: torch.tensor([[1.0, 0.0], [0.0, 2.0]]), B: torch.tensor([[1.0, 3.0]])}
    strategy = HetLoRA(prune_gamma=0.5, rank_penalty=0.1)
    memory = {}
    params = {k: torch.nn.Parameter(v.clone()) for k, v in start.items()}
    for p in params.values():
        p.grad = torch.zeros_like(p)
    correction = strategy.local_correction(start, {}, memory)
    correction.correct_gradients(params)
    # d(|a||b|)/da = |b| a/|a| = 3 * [0, 1]; d/db = |a| b/|b| = 2 * [1]; times lambda 0.1
    torch.testing.assert_close(params[A].grad, torch.tensor([[0.0, 0.0], [0.0, 0.3]]))
    torch.testing.assert_close(params[B].grad, torch.tensor([[0.0, 0.2]]))
    first = {k: v.clone() for k, v in start.items()}
    assert correction.finish(first, 1, 0.1)[RANK_KEY].tolist() == [2.0]  # no previous penalty: no pruning
    assert memory[PENALTY_KEY].item() == 6.0 and torch.equal(first[A], start[A])
    second = {A: torch.tensor([[1.0, 0.0], [0.0, 1.0]]), B: torch.tensor([[1.0, 3.0]])}  # penalty 3 < 6
    extras = strategy.local_correction(start, {}, memory).finish(second, 1, 0.1)
    assert extras[RANK_KEY].tolist() == [1.0] and memory[RANK_KEY].item() == 1
    assert second[A].tolist() == [[1.0, 0.0], [0.0, 0.0]] and second[B].tolist() == [[1.0, 0.0]]


def test_a_pruned_client_is_sent_its_kept_rank_from_the_next_round(tmp_path):
    strategy = HetLoRA(prune_gamma=0.5, rank_penalty=1.0)
    loop = FederatedLoop(
        rounds=4, clients_per_round=4, local_steps=2, seed=0, strategy=strategy, hooks=[ClientRanks(per_client=[4] * 4)]
    )
    fit(tiny_dpo(r=4), preference_data(), loop, str(tmp_path))
    full = sum(4 * v.numel() for v in loop.server.global_state.values())
    downs = [r["down_bytes"] for r in loop.server.report.history]
    # rounds 1-2: the penalty grows as B leaves 0; round 3: it falls, all four prune to rank 2;
    # round 4: each is sent (and sends) rank 2, half the LoRA bytes
    assert downs == [4 * full, 4 * full, 4 * full, 2 * full], downs
    assert strategy.client_ranks == [2, 2, 2, 2] and loop.store.get(0)["memory"]["hetlora/rank"].item() == 2
