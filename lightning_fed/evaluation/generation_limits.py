"""Generation lengths checked against the evaluated model's longest sequence, before any benchmark runs.

lm-eval's ``HFLM`` keeps ``max_length - max_gen_toks`` tokens of each prompt; a generation
length at or past the model's maximum failed inside the generation step, after every benchmark
before it had run (HumanEval's default 256 new tokens on the ``tiny`` run's 256 positions: exit
1 after minutes of multiple-choice scoring, with lm-eval's assertion and no option named).
"""

from __future__ import annotations

from typing import Any

GENERATION_OPTIONS = {
    "humaneval": ("max_new_tokens",),
    "judge": ("max_new_tokens",),
}
"""The options of each benchmark that set how many tokens the evaluated model generates (a local
judge model's ``judge_max_new_tokens`` is checked against that model by the judge itself)."""


def generation_problems(plan: dict[str, Any], max_length: int, length_from: str) -> list[str]:
    """One line per generation length in ``plan`` that leaves no room for a prompt.

    Args:
        plan: :func:`~lightning_fed.evaluation.arguments.prepare`'s plan (the options of each benchmark).
        max_length: The evaluated model's longest sequence (lm-eval's ``HFLM.max_length``).
        length_from: Where ``max_length`` comes from, to name in the message.
    """
    problems = []
    for benchmark, names in GENERATION_OPTIONS.items():
        options = plan.get(benchmark)
        for name in names if options is not None else ():
            value = getattr(options, name)
            if value >= max_length:
                problems.append(
                    f"--{benchmark}.{name} {value} must be less than the model's maximum sequence length"
                    f" {max_length} ({length_from}): the prompt needs room; e.g. --{benchmark}.{name}"
                    f" {max(1, max_length // 2)}"
                )
    return problems


def length_source(lm_max_length: int | None) -> str:
    """How the evaluated model's maximum sequence length was set, for :func:`generation_problems`."""
    return "--lm_eval.max_length" if lm_max_length is not None else "its config's positions, or --lm_eval.max_length"
