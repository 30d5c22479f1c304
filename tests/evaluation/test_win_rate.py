"""Win rate (Table 1 of Wu et al., 2024): arithmetic by hand, then a real tiny selector as judge."""

import pytest
import torch

from lightning_fed.evaluation.win_rate import SelectorJudge, WinRate, policy_win_rate, tally, win_rate
from lightning_fed.modules.selector import choice_logits
from tests.helpers.runs import tiny_dpo
from tests.modules.test_selector import tiny_selector


class LongerIsBetter:
    """A deterministic judge: the longer response wins; on equal lengths it always says "A"."""

    def prefers_first(self, prompts, first, second):
        return [len(a) > len(b) or len(a) == len(b) for a, b in zip(first, second)]


def test_table_1_arithmetic():
    # Gemma-2B + FedBis (Qwen-2 selector): 86.69% (5681 / 26) of 6553 test posts.
    result = WinRate(wins=5681, ties=26, losses=6553 - 5681 - 26)
    assert result.total == 6553 and str(result) == "86.69% (5681 / 26)"
    assert result.as_dict()["win_rate"] == pytest.approx(5681 / 6553)


def test_wins_ties_losses_by_hand():
    prompts = ["p1", "p2", "p3", "p4", "p5"]
    candidates = ["aaa", "a", "bb", "cccc", "d"]
    references = ["a", "aaa", "xy", "c", "d"]
    # p1: longer in both orders -> win; p2: shorter -> loss; p3, p5: equal lengths, the judge
    # says "A" in both orders (position-inconsistent) -> tie; p4: win.  2 / 5 = 40%.
    result = win_rate(LongerIsBetter(), prompts, candidates, references)
    assert (result.wins, result.ties, result.losses) == (2, 2, 1) and result.rate == pytest.approx(0.4)
    assert str(result) == "40.00% (2 / 2)"
    assert tally([True, False, True, False], [False, True, True, False]) == WinRate(1, 2, 1)
    with pytest.raises(ValueError, match="need as many prompts, candidates and references"):
        win_rate(LongerIsBetter(), prompts, candidates, references[:2])


def _perturb(module, scale=0.5, seed=1):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * scale)


def test_real_selector_judge_matches_its_logits_and_swaps_wins_with_losses():
    selector = tiny_selector(num_selectors=3)
    _perturb(selector)  # three different selectors
    judge = SelectorJudge(selector, template="short", max_length=200, batch_size=3)
    prompts = [f"q{i}" for i in range(8)]
    cands = ["good nice", "bad", "great great fine", "ok", "happy", "sad sad", "fine", "nice day"]
    refs = ["awful", "good good", "poor", "ugly ok", "sad", "happy happy", "fine", "bad day"]
    picks = judge.prefers_first(prompts, cands, refs)
    # By hand from the logits: each selector's verdict, then the majority of the three.
    from lightning_fed.datamodules.selector import selector_prompt
    from lightning_fed.datamodules.tokenize import encode_prompt

    for i in (0, 6):
        ids = torch.tensor([encode_prompt(selector.tokenizer, selector_prompt("short", prompts[i], cands[i], refs[i]))])
        votes = []
        for u in range(3):
            selector.use_selector(u)
            logits = choice_logits(selector.model(input_ids=ids).logits, torch.ones_like(ids), selector.choice_ids)
            votes.append(bool(logits[0, 0] > logits[0, 1]))
        assert picks[i] == (sum(votes) >= 2)
    forward, backward = win_rate(judge, prompts, cands, refs), win_rate(judge, prompts, refs, cands)
    assert forward.total == backward.total == 8
    assert (forward.wins, forward.ties, forward.losses) == (backward.losses, backward.ties, backward.wins)
    assert forward.ties >= 1  # pair 6 shows the same text twice: the same letter in both orders


def test_untuned_policy_against_itself_only_ties_then_tuned_differs():
    policy, judge = tiny_dpo(), SelectorJudge(tiny_selector(), template="short", max_length=400)
    prompts = ["How was the movie?", "Rate the cafe.", "Any plans?"]
    result, cands, refs = policy_win_rate(policy, judge, prompts, max_new_tokens=8)
    assert cands == refs and result == WinRate(0, 3, 0)  # LoRA starts at B = 0: the same policy
    _perturb(policy, scale=2.0)
    result, cands, refs = policy_win_rate(policy, judge, prompts, max_new_tokens=8)
    assert cands != refs and result.total == 3


def test_policy_answers_in_the_chat_template_it_was_trained_on(monkeypatch):
    import importlib

    # (the package exports the function ``win_rate``, which hides the module of that name)
    win_rate_module = importlib.import_module("lightning_fed.evaluation.win_rate")
    seen, generate = [], win_rate_module.generate_responses

    def recording(model, tokenizer, prompts, max_new_tokens):
        seen.append(list(prompts))
        return generate(model, tokenizer, prompts, max_new_tokens)

    monkeypatch.setattr(win_rate_module, "generate_responses", recording)
    policy = tiny_dpo()  # its byte-level tokenizer carries a ChatML chat template
    result, cands, refs = policy_win_rate(
        policy, LongerIsBetter(), ["Rate the cafe."], template="chat", max_new_tokens=4, system_prompt="Be brief."
    )
    chatml = (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nRate the cafe.<|im_end|>\n<|im_start|>assistant\n"
    )
    assert seen == [[chatml], [chatml]]  # the tuned policy, then its base: the same chat prompt
    assert cands == refs and result == WinRate(0, 1, 0)
    seen.clear()
    policy_win_rate(policy, LongerIsBetter(), ["Rate the cafe."], max_new_tokens=4)
    assert seen == [["Rate the cafe.\n"]] * 2  # plain: the prompt and a newline
