"""``lightning-fed evaluate --benchmarks [judge]``: the evaluated model's answers, judged.

For each prompt of a JSONL file (``{"prompt": ..., "reference": ...}``, reference optional) the
evaluated model answers greedily (batched). Pairwise (FedBiscuit Table 1, Wu et al., 2024): its
answers against the references, or, when the file has none, against the same model with its
adapter disabled (the base, as :func:`~lightning_fed.evaluation.win_rate.policy_win_rate`
does), each pair judged in both orders by :func:`~lightning_fed.evaluation.win_rate.win_rate`.
Single (MT-Bench): the judge's 1-10 rating of each answer, averaged over parsed ratings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_fed.evaluation.judge import LLMJudge, LocalChatBackend, OpenAIChatBackend
from lightning_fed.hook_rules import PROMPT_TEMPLATES as TEMPLATE_CHOICES  # datamodules' (imports torch)
from lightning_fed.json_lines import numbered_records
from lightning_fed.path_kinds import no_file_said

DEFAULT_PROMPTS = Path(__file__).resolve().parent / "tasks" / "judge_prompts.jsonl"
MODES = ("pairwise", "single")
SAMPLES_FILE = "judge_samples.jsonl"


@dataclass
class JudgeOptions:
    """LLM-as-judge evaluation (``--benchmarks [judge]``). The judge is exactly one of ``url``
    (an OpenAI-compatible endpoint, ``model`` naming its model), ``model`` (a local HF model) or
    ``backbone`` (a local model built from a backbone config)."""

    modes: list[str] = field(default_factory=lambda: list(MODES))
    """``pairwise`` (win rate) and/or ``single`` (MT-Bench 1-10 grading)."""

    prompts: str | None = None
    """JSONL file of ``{"prompt": ..., "reference": ...}`` rows (reference optional). Default: the
    package's 8 example instructions (``lightning_fed/evaluation/tasks/judge_prompts.jsonl``)."""

    limit: int | None = None
    """Use the first ``limit`` prompts only."""

    template: str | None = None
    """How a prompt is shown to the evaluated model: alpaca, plain or chat (the tokenizer's chat
    template). Default: the run's ``data.init_args.template``, else plain."""

    system_prompt: str | None = None
    """System prompt of the ``chat`` template. Default: the run's ``data.system_prompt`` when the
    template is the run's."""

    max_new_tokens: int = 128
    """Most tokens of each answer of the evaluated model."""

    model: str | None = None
    """The judge: a local model (hub id, folder, ``gguf:...``), or with ``url`` the endpoint's model name."""

    backbone: dict[str, Any] | None = None
    """The judge built from a backbone config (``{"config": {...}, "tokenizer": "bytes"}``)."""

    seed: int = 0
    """Seed of a judge built from ``backbone.config`` (random weights)."""

    url: str | None = None
    """OpenAI-compatible endpoint: ``https://host/v1`` or ``.../v1/chat/completions``."""

    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable with the endpoint's API key (no key sent when unset)."""

    judge_max_new_tokens: int = 512
    """Most tokens of each judgment."""

    timeout: float = 60.0
    """Seconds per endpoint request."""

    concurrency: int = 4
    """Endpoint requests in flight at once."""

    def __post_init__(self) -> None:
        problems = []
        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes:
            problems.append(f"--judge.modes must be a non-empty list of {list(MODES)}, got {self.modes}")
        sources = [n for n, v in (("url", self.url), ("backbone", self.backbone)) if v is not None]
        if self.model is not None and self.url is None:
            sources.append("model")
        if len(sources) != 1:
            problems.append(
                "--judge: set exactly one of --judge.url (with --judge.model), --judge.model or --judge.backbone, got "
                f"{sources or 'none'}"
            )
        if self.url is not None and not self.model:
            problems.append(f"--judge.url {self.url!r} needs --judge.model (the endpoint's model name)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            problems.append(f"--judge.url must start with http:// or https://, got {self.url!r}")
        if self.backbone is not None:
            from lightning_fed.modules.backbone import BackboneConfig

            try:
                BackboneConfig(**self.backbone)
            except (TypeError, ValueError) as err:
                problems.append(f"--judge.backbone {self.backbone}: {err}")
        if self.template is not None and self.template not in TEMPLATE_CHOICES:
            problems.append(f"--judge.template must be one of {list(TEMPLATE_CHOICES)}, got {self.template!r}")
        for name in ("limit", "max_new_tokens", "judge_max_new_tokens", "concurrency"):
            value = getattr(self, name)
            if value is not None and value < 1:
                problems.append(f"--judge.{name} must be >= 1, got {value}")
        if self.prompts is not None and (said := no_file_said(Path(self.prompts).expanduser())):
            problems.append(f"--judge.prompts {self.prompts!r}{said}")
        if problems:
            raise ValueError("; ".join(problems))


def load_prompts(options: JudgeOptions) -> list[dict[str, str]]:
    """The prompt rows, checked: each a JSON object with a non-empty string ``prompt``."""
    path = Path(options.prompts).expanduser() if options.prompts else DEFAULT_PROMPTS
    rows = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, row in numbered_records(
        lines, lambda n: ValueError(f"--judge.prompts {str(path)!r} line {n}: not JSON")
    ):
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not row["prompt"].strip():
            raise ValueError(f"--judge.prompts {str(path)!r} line {number}: needs a non-empty string 'prompt'")
        if "reference" in row and not isinstance(row["reference"], str):
            raise ValueError(f"--judge.prompts {str(path)!r} line {number}: 'reference' must be a string")
        rows.append(row)
    if not rows:
        raise ValueError(f"--judge.prompts {str(path)!r}: no prompts")
    return rows[: options.limit] if options.limit else rows


def has_references(rows: list[dict[str, str]]) -> bool:
    return all("reference" in r for r in rows)


def make_judge(options: JudgeOptions, batch_size: int = 8) -> LLMJudge:
    """The judge the options name (a local model is loaded here)."""
    if options.url is not None:
        backend = OpenAIChatBackend(
            options.url,
            options.model,
            options.api_key_env,
            options.judge_max_new_tokens,
            options.timeout,
            options.concurrency,
        )
        return LLMJudge(backend)
    from lightning_fed.evaluation.lm_eval_tasks import make_lm
    from lightning_fed.evaluation.run_model import build_backbone
    from lightning_fed.modules.backbone import BackboneConfig

    spec = (
        BackboneConfig(**options.backbone)
        if options.backbone is not None
        else BackboneConfig(name_or_path=options.model)
    )
    model, tokenizer = build_backbone(spec, options.seed)
    name = options.model or f"backbone config {spec.config}"
    return LLMJudge(
        LocalChatBackend(make_lm(model, tokenizer, batch_size), tokenizer, options.judge_max_new_tokens, name)
    )


def prompt_format(
    options: JudgeOptions, run_template: str | None, run_system_prompt: str | None
) -> tuple[str, str | None]:
    """How the evaluated model is prompted: ``(template, system_prompt)``.

    ``--judge.template``, else the run's ``data.template``, else ``plain``; ``--judge.system_prompt``,
    else the run's ``data.system_prompt`` when the template is the run's: a model trained on its
    chat template (and system turn) answers in the format it was trained on.
    """
    template = options.template or run_template or "plain"
    system_prompt = options.system_prompt
    if system_prompt is None and template == run_template:
        system_prompt = run_system_prompt
    return template, system_prompt


def evaluate_judge(
    model: Any,
    tokenizer: Any,
    lm: Any,
    judge: LLMJudge,
    rows: list[dict[str, str]],
    options: JudgeOptions,
    template: str,
    out_dir: Path,
    system_prompt: str | None = None,
) -> dict[str, Any]:
    """Answer ``rows`` with the evaluated model and judge the answers.

    Args:
        model: The evaluated model (PEFT-wrapped when it has an adapter; the base is its
            adapter disabled).
        tokenizer: Its tokenizer.
        lm: The same model as an lm-eval ``HFLM`` (batched generation).
        judge: The judge.
        rows: Prompt rows from :func:`load_prompts`.
        options: The judge options.
        template: Prompt template of the evaluated model (see :func:`prompt_format`).
        out_dir: Where ``judge_samples.jsonl`` (per prompt: the question, the text the model was
            given, its answer and the reference; then the judgments) is written.
        system_prompt: System turn of the ``chat`` template (see :func:`prompt_format`).

    Returns:
        ``{"pairwise": {win_rate, wins, ties, losses, total, against}, "single": {score,
        n_rated, n_unparsed}, "judge", "template", "system_prompt", "unparsed", "samples"}``.
    """
    from lightning_fed.datamodules.templates import format_prompt
    from lightning_fed.evaluation.lm_eval_tasks import generate_until
    from lightning_fed.evaluation.win_rate import win_rate

    questions = [r["prompt"] for r in rows]
    formatted = [format_prompt(template, q, tokenizer=tokenizer, system_prompt=system_prompt) for q in questions]
    answers = [a.strip() for a in generate_until(lm, formatted, [], options.max_new_tokens)]
    result: dict[str, Any] = {
        "judge": judge.backend.name,
        "template": template,
        "system_prompt": system_prompt,
        "n_prompts": len(rows),
    }
    references: list[str] | None = None
    if "pairwise" in options.modes:
        if has_references(rows):
            references, against = [r["reference"] for r in rows], "reference"
        else:
            if not hasattr(model, "disable_adapter"):
                raise ValueError(
                    "--judge.modes pairwise: the prompts have no 'reference' and the model has no adapter to compare "
                    "against"
                )
            with model.disable_adapter():
                references = [a.strip() for a in generate_until(lm, formatted, [], options.max_new_tokens)]
            against = "base"
        result["pairwise"] = {**win_rate(judge, questions, answers, references).as_dict(), "against": against}
    if "single" in options.modes:
        ratings = judge.grades(questions, answers)
        rated = [r for r in ratings if r is not None]
        score = sum(rated) / len(rated) if rated else None
        result["single"] = {"score": score, "n_rated": len(rated), "n_unparsed": len(ratings) - len(rated)}
    result["unparsed"] = judge.unparsed()
    out_dir.mkdir(parents=True, exist_ok=True)
    samples = out_dir / SAMPLES_FILE
    with samples.open("w", encoding="utf-8") as fh:
        for i, question in enumerate(questions):
            row = {"prompt": question, "model_prompt": formatted[i], "answer": answers[i]}
            if references is not None:
                row["reference"] = references[i]
            fh.write(json.dumps(row) + "\n")
        for record in judge.records:
            fh.write(json.dumps(record) + "\n")
    result["samples"] = str(samples)
    return result
