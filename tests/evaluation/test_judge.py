"""LLM judge: MT-Bench answer parsing, the OpenAI-compatible backend against a stub server,
win rate through the shared tally, and a local tiny model as judge."""

import pytest

from lightning_fed.evaluation.judge import (
    LLMJudge,
    LocalChatBackend,
    OpenAIChatBackend,
    parse_pair_verdict,
    parse_rating,
)
from lightning_fed.evaluation.win_rate import win_rate
from tests.evaluation.judge_server import REFERENCE, StubJudgeServer


def test_parsing_follows_mt_bench():
    assert parse_pair_verdict("blah [[A]]") == "A"
    assert parse_pair_verdict("[[B]] final") == "B"
    assert parse_pair_verdict("a tie: [[C]]") == "tie"
    assert parse_pair_verdict("A is better") == "unparsed"
    assert parse_rating("Rating: [[8]]") == 8.0
    assert parse_rating("Rating: [7.5]") == 7.5
    assert parse_rating("Rating: [[11]]") is None
    assert parse_rating("no rating") is None


def test_endpoint_judge_win_rate_and_grades(monkeypatch):
    monkeypatch.setenv("LF_TEST_JUDGE_KEY", "sk-test")
    prompts = ["q1", "q2", "q3"]
    candidates = ["good answer 1", "good answer 2", "good answer 3"]
    references = [REFERENCE] * 3
    with StubJudgeServer() as server:
        judge = LLMJudge(
            OpenAIChatBackend(server.url, "judge-model", api_key_env="LF_TEST_JUDGE_KEY", max_tokens=64, concurrency=2)
        )
        result = win_rate(judge, prompts, candidates, references)
        grades = judge.grades(prompts, candidates)
    # Both orders are judged: the candidate is picked as A in one and as B in the other.
    assert (result.wins, result.ties, result.losses) == (3, 0, 0)
    assert grades == [7.0, 7.0, 7.0]
    assert len(server.requests) == 9  # 3 pairs x 2 orders + 3 grades
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["model"] == "judge-model" and request["temperature"] == 0 and request["max_tokens"] == 64
    assert all(h["Authorization"] == "Bearer sk-test" for h in server.headers)
    assert judge.unparsed() == 0


def test_position_bias_and_unparsed_answers_are_ties():
    with StubJudgeServer(answer=lambda prompt: "[[A]]" if "Assistant A" in prompt else "I cannot rate this") as server:
        judge = LLMJudge(OpenAIChatBackend(server.url + "/chat/completions", "m"))
        result = win_rate(judge, ["q1", "q2"], ["x", "y"], ["r1", "r2"])
        grades = judge.grades(["q1"], ["x"])
    assert (result.wins, result.ties, result.losses) == (0, 2, 0)
    assert grades == [None]
    assert judge.unparsed() == 1


def test_endpoint_errors_are_one_line():
    with StubJudgeServer(status=401) as server:
        judge = LLMJudge(OpenAIChatBackend(server.url, "m"))
        with pytest.raises(RuntimeError, match=r"--judge.url .*HTTP 401.*invalid api key") as err:
            judge.grades(["q"], ["a"])
    assert "\n" not in str(err.value)


def test_local_tiny_model_as_judge(tiny_backbone):
    """A local model judges through lm-eval's batched generation; a random one rarely follows the
    format, and whatever it says is parsed by the same rules and counted."""
    from lightning_fed.evaluation.lm_eval_tasks import make_lm
    from lightning_fed.evaluation.run_model import build_backbone

    model, tokenizer = build_backbone(tiny_backbone, seed=0)
    backend = LocalChatBackend(make_lm(model, tokenizer, batch_size=4), tokenizer, max_new_tokens=6, name="tiny")
    judge = LLMJudge(backend)
    result = win_rate(judge, ["q1", "q2"], ["a1", "a2"], ["r1", "r2"])
    grades = judge.grades(["q1", "q2"], ["a1", "a2"])
    assert result.total == 2 and len(grades) == 2
    assert len(judge.records) == 6
    # The byte tokenizer has one token per byte: each judgment is at most max_new_tokens long.
    assert all(len(r["judgment"].encode()) <= 6 for r in judge.records)
    # The judge sees the chat in its tokenizer's chat template (ChatML for the byte tokenizer).
    shown = backend._format(judge._chats(["hello"])[0])
    assert shown.startswith("<|im_start|>system\n") and shown.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\nhello<|im_end|>" in shown
