"""An LLM as judge: pairwise verdicts and single 1-10 grades (Zheng et al., 2023, MT-Bench,
arXiv:2306.05685), from a local Hugging Face model or an OpenAI-compatible endpoint.

The prompts are MT-Bench's ``pair-v2`` and ``single-v1`` judge prompts (FastChat
``judge_prompts.jsonl``) and the answers are parsed as FastChat parses them: ``[[A]]``, ``[[B]]``
or ``[[C]]`` (tie) for a pair, ``[[rating]]`` (or ``[rating]``) for a grade; anything else is
*unparsed* and counted. :class:`LLMJudge` is a :class:`~lightning_fed.evaluation.win_rate.PairJudge`,
so :func:`~lightning_fed.evaluation.win_rate.win_rate` judges each pair in both orders and
counts an order-dependent verdict (or a tie, or an unparsed answer) as a tie, as FedBiscuit's
Table 1 does (Wu et al., 2024, arXiv:2407.03038).

Backends: :class:`LocalChatBackend` generates with an lm-eval ``HFLM`` (batched), with the
judge tokenizer's chat template when it has one; :class:`OpenAIChatBackend` posts to
``<url>/chat/completions`` with the standard library (``urllib``), greedy (temperature 0), the
API key read from an environment variable.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

JUDGE_SYSTEM = "You are a helpful assistant."

PAIR_PROMPT = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI assistants to the "
    "user question displayed below. You should choose the assistant that follows the user's instructions and answers "
    "the user's question better. Your evaluation should consider factors such as the helpfulness, relevance, accuracy, "
    "depth, creativity, and level of detail of their responses. Begin your evaluation by comparing the two responses "
    "and provide a short explanation. Avoid any position biases and ensure that the order in which the responses were "
    "presented does not influence your decision. Do not allow the length of the responses to influence your "
    "evaluation. Do not favor certain names of the assistants. Be as objective as possible. After providing your "
    "explanation, output your final verdict by strictly following "
    'this format: "[[A]]" if assistant A is better, "[[B]]" if assistant B is better, and "[[C]]" for a tie.\n\n'
    "[User Question]\n{question}\n\n[The Start of Assistant A's Answer]\n{answer_a}\n[The End of Assistant A's "
    "Answer]\n\n[The Start of Assistant B's Answer]\n{answer_b}\n[The End of Assistant B's Answer]"
)

SINGLE_PROMPT = (
    "[Instruction]\nPlease act as an impartial judge and evaluate the quality of the response provided by an AI "
    "assistant to the user question displayed below. Your evaluation should consider factors such as the helpfulness, "
    "relevance, accuracy, depth, creativity, and level of detail of the response. Begin your evaluation by providing a "
    "short explanation. Be as objective as possible. After providing your explanation, you must rate the response on a "
    "scale of 1 to 10 by strictly following this "
    'format: "[[rating]]", for example: "Rating: [[5]]".\n\n[Question]\n{question}\n\n'
    "[The Start of Assistant's Answer]\n{answer}\n[The End of Assistant's Answer]"
)

_SCORE = re.compile(r"\[\[(\d+\.?\d*)\]\]")
_SCORE_BACKUP = re.compile(r"\[(\d+\.?\d*)\]")


def parse_pair_verdict(text: str) -> str:
    """``"A"``, ``"B"``, ``"tie"`` from ``[[A]]``/``[[B]]``/``[[C]]``, else ``"unparsed"`` (FastChat's rule)."""
    if "[[A]]" in text:
        return "A"
    if "[[B]]" in text:
        return "B"
    if "[[C]]" in text:
        return "tie"
    return "unparsed"


def parse_rating(text: str) -> float | None:
    """The 1-10 rating in ``[[r]]`` (or ``[r]``); ``None`` when absent or outside 1..10."""
    match = _SCORE.search(text) or _SCORE_BACKUP.search(text)
    if match is None:
        return None
    value = float(match.group(1))
    return value if 1 <= value <= 10 else None


class ChatBackend(Protocol):
    """Answers a batch of chats (lists of ``{"role", "content"}`` messages)."""

    name: str

    def complete(self, chats: Sequence[list[dict[str, str]]]) -> list[str]: ...


class LocalChatBackend:
    """A local causal LM as judge, generating greedily through lm-eval's ``HFLM`` (batched).

    Args:
        lm: The judge as an lm-eval ``HFLM``.
        tokenizer: Its tokenizer; its chat template formats the chat when it has one, else the
            messages are joined as plain text.
        max_new_tokens: Most tokens of each judgment.
        name: Shown in the results.
    """

    def __init__(self, lm: Any, tokenizer: Any, max_new_tokens: int = 512, name: str = "local") -> None:
        self.lm, self.tokenizer, self.max_new_tokens, self.name = lm, tokenizer, max_new_tokens, name

    def _format(self, chat: list[dict[str, str]]) -> str:
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        return "\n\n".join(m["content"] for m in chat) + "\n\n"

    def complete(self, chats: Sequence[list[dict[str, str]]]) -> list[str]:
        from lightning_fed.evaluation.lm_eval_tasks import generate_until

        return generate_until(self.lm, [self._format(c) for c in chats], [], self.max_new_tokens)


class OpenAIChatBackend:
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint as judge (stdlib ``urllib``).

    Args:
        url: The API base (``https://api.openai.com/v1``, ``http://localhost:8000/v1``) or the
            full ``.../chat/completions`` address.
        model: The ``model`` field of each request.
        api_key_env: Environment variable holding the key (sent as ``Authorization: Bearer``);
            no header when it is unset (local servers).
        max_tokens: Most tokens of each judgment.
        timeout: Seconds per request.
        concurrency: Requests in flight at once.
    """

    def __init__(
        self,
        url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        max_tokens: int = 512,
        timeout: float = 60.0,
        concurrency: int = 4,
    ) -> None:
        base = url.rstrip("/")
        self.url = base if base.endswith("/chat/completions") else base + "/chat/completions"
        self.model, self.api_key_env, self.max_tokens, self.timeout, self.concurrency = (
            model,
            api_key_env,
            max_tokens,
            timeout,
            concurrency,
        )
        self.name = f"{model} @ {self.url}"

    def _post(self, chat: list[dict[str, str]]) -> str:
        body = {"model": self.model, "messages": chat, "temperature": 0, "max_tokens": self.max_tokens}
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                reply = json.loads(response.read().decode())
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")[:200].replace("\n", " ")
            raise RuntimeError(f"--judge.url {self.url}: HTTP {err.code} {err.reason}: {detail}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as err:
            raise RuntimeError(f"--judge.url {self.url}: {getattr(err, 'reason', err)}") from None
        except json.JSONDecodeError:
            raise RuntimeError(f"--judge.url {self.url}: the reply is not JSON") from None
        try:
            return reply["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise RuntimeError(
                f"--judge.url {self.url}: no choices[0].message.content in the reply: {str(reply)[:200]}"
            ) from None

    def complete(self, chats: Sequence[list[dict[str, str]]]) -> list[str]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(self._post, chats))


class LLMJudge:
    """An LLM judge: pairwise verdicts (a :class:`PairJudge`) and single grades.

    Args:
        backend: Who answers the judge prompts.
        system: System message of every judge chat.
    """

    def __init__(self, backend: ChatBackend, system: str = JUDGE_SYSTEM) -> None:
        self.backend, self.system = backend, system
        self.records: list[dict[str, Any]] = []  # every judgment, for the samples file

    def _chats(self, prompts: Sequence[str]) -> list[list[dict[str, str]]]:
        return [[{"role": "system", "content": self.system}, {"role": "user", "content": p}] for p in prompts]

    def verdicts(self, questions: Sequence[str], first: Sequence[str], second: Sequence[str]) -> list[str]:
        """Per pair shown as (A = first, B = second): ``"A"``, ``"B"``, ``"tie"`` or ``"unparsed"``."""
        prompts = [
            PAIR_PROMPT.format(question=q, answer_a=a, answer_b=b)
            for q, a, b in zip(questions, first, second, strict=True)
        ]
        answers = self.backend.complete(self._chats(prompts))
        verdicts = [parse_pair_verdict(a) for a in answers]
        self.records += [
            {"kind": "pair", "question": q, "answer_a": a, "answer_b": b, "judgment": j, "verdict": v}
            for q, a, b, j, v in zip(questions, first, second, answers, verdicts)
        ]
        return verdicts

    def prefers_first(self, prompts: Sequence[str], first: Sequence[str], second: Sequence[str]) -> list[bool]:
        """:class:`PairJudge`: whether A was picked (a tie or an unparsed answer is not a pick)."""
        return [v == "A" for v in self.verdicts(prompts, first, second)]

    def grades(self, questions: Sequence[str], answers: Sequence[str]) -> list[float | None]:
        """MT-Bench single grading: the 1-10 rating of each answer, ``None`` when unparsed."""
        prompts = [SINGLE_PROMPT.format(question=q, answer=a) for q, a in zip(questions, answers, strict=True)]
        judgments = self.backend.complete(self._chats(prompts))
        ratings = [parse_rating(j) for j in judgments]
        self.records += [
            {"kind": "single", "question": q, "answer": a, "judgment": j, "rating": r}
            for q, a, j, r in zip(questions, answers, judgments, ratings)
        ]
        return ratings

    def unparsed(self) -> int:
        """Judgments so far with no verdict or rating in them."""
        return sum(
            r.get("verdict") == "unparsed" or (r["kind"] == "single" and r["rating"] is None) for r in self.records
        )
