"""ROUGE on held-out tasks, as a round hook: FedHDS's metric (Sec. 5.1).

After aggregation (every ``every_n_rounds`` rounds and after the last one) the global
model answers the held-out prompts greedily. The periodic evaluations use a seeded subset of
``max_examples`` prompts (cheap monitoring); the one after the last round uses the *whole*
held-out set by default (``final_full``), as the paper reports ROUGE-L on all held-out
samples after the final round (FedHDS, Sec. 5.1); ROUGE-1/2/L against the references are logged
as ``round/rouge1``, ``round/rouge2``, ``round/rougeL`` (step = round), kept in
:attr:`HeldOutRouge.history` (checkpointed) and written to ``rouge.json`` in the run folder.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_fed.evaluation.generation import generate_responses
from lightning_fed.evaluation.rouge import ROUGE_TYPES, rouge_scores
from lightning_fed.federation.hooks import Capability, RoundHook

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.federation.context import RoundContext
    from lightning_fed.federation.server_round import ServerRound


def where_text(value: Any) -> Any:
    """A held-out row's ``value`` as ``where``'s text matches it: a number or boolean by Python's text of it
    (``1`` by ``'1'``, ``2.5`` by ``'2.5'``, ``True`` by ``'True'``), text and nulls as they are."""
    return str(value) if isinstance(value, (bool, int, float)) else value


def held_out_examples(
    dataset: str,
    synthetic_args: dict | None = None,
    field_map: dict | None = None,
    split: str = "test",
    max_examples: int | None = None,
    seed: int = 0,
    where: dict[str, str] | None = None,
    hook: str = "federation.hooks: HeldOutRouge",
) -> list[dict[str, str]]:
    """Instruction records (``instruction``, ``input``, ``output``) of a held-out set.

    ``dataset`` takes the forms of ``data.dataset``; e.g. ``synthetic:instructions`` with
    ``synthetic_args={"families": ["capitalize"], ...}`` for planted held-out families.
    ``where`` keeps the rows whose columns equal the given values (Dolly-15K's held-out
    category: ``{"category": "summarization"}``). With ``max_examples``, a seeded random
    subset of that size. ``hook`` names the hook's options in a refusal (``federation.hooks[0]``); a
    ``where`` naming no column of the set, or keeping none of its rows, is a
    :class:`~lightning_fed.errors.ValueRefusal` in the precheck's line (lightning_fed/held_out_rules.py).
    """
    from lightning_fed.datamodules.sources import load_public_records
    from lightning_fed.errors import ValueRefusal

    option, where_option = f"{hook}.dataset", f"{hook}.where"
    records = load_public_records(option, dataset, "instruction", split, field_map, synthetic_args)
    for column, value in (where or {}).items():
        if column not in records.column_names:
            shown = ", ".join(records.column_names)
            line = f"{where_option}: {option} {dataset!r} has no column {column!r} (columns: {shown})"
            raise ValueRefusal(line)
        records = records.filter(lambda row, c=column, v=value: where_text(row[c]) == v)
    if len(records) == 0:
        raise ValueRefusal(f"{where_option}: no row of {option} {dataset!r} matches where={where}")
    order = np.arange(len(records))
    if max_examples is not None and max_examples < len(records):
        order = np.sort(np.random.default_rng(seed).permutation(len(records))[:max_examples])
    return [
        {
            "instruction": records[int(i)]["instruction"],
            "input": records[int(i)].get("input") or "",
            "output": records[int(i)]["output"],
        }
        for i in order
    ]


def evaluate_rouge(
    module: Any,
    examples: list[dict[str, str]],
    template: str,
    max_new_tokens: int = 64,
    batch_size: int = 16,
    system_prompt: str | None = None,
) -> tuple[dict[str, float], list[str]]:
    """Mean ROUGE F-measures of ``module.model``'s greedy answers, and the answers.

    ``template`` may be ``chat`` (the tokenizer's chat template, with ``system_prompt``).
    """
    from lightning_fed.datamodules.templates import format_prompt

    prompts = [format_prompt(template, e["instruction"], e["input"], module.tokenizer, system_prompt) for e in examples]
    answers = generate_responses(module.model, module.tokenizer, prompts, max_new_tokens, batch_size)
    return rouge_scores(answers, [e["output"] for e in examples], ROUGE_TYPES), answers


class HeldOutRouge(RoundHook):
    """Generates on held-out tasks after aggregation and reports ROUGE.

    Args:
        dataset: Held-out data (``data.dataset`` forms).
        synthetic_args: Arguments of a synthetic held-out set.
        field_map: Column names of the held-out set.
        split: Split of a hub data set.
        max_examples: Evaluate on this many examples (seeded subset).
        max_new_tokens: Most tokens generated per answer.
        batch_size: Prompts per ``generate`` call.
        every_n_rounds: Evaluate after every n-th round (and always after the last).
        template: Prompt template (default: the data module's).
        seed: Seed of the subset.
        where: Keep rows whose columns have these values (e.g. a held-out category): text, a number
            or boolean column matched by Python's text of its values (:func:`where_text`).
        final_full: After the last round, evaluate on the full held-out set, not the
            ``max_examples`` subset (the paper's protocol; ``False`` keeps the subset).
    """

    #: It generates on the server after aggregation: nothing runs in a client's turn.
    capabilities = frozenset({Capability.BATCH_SAFE})

    def __init__(
        self,
        dataset: str = "synthetic:instructions",
        synthetic_args: dict[str, Any] | None = None,
        field_map: dict[str, str] | None = None,
        split: str = "test",
        max_examples: int | None = 64,
        max_new_tokens: int = 64,
        batch_size: int = 16,
        every_n_rounds: int = 1,
        template: str | None = None,
        seed: int = 0,
        where: dict[str, str] | None = None,
        final_full: bool = True,
    ) -> None:
        if every_n_rounds < 1:
            raise ValueError(f"`every_n_rounds` must be >= 1, got {every_n_rounds}")
        if max_examples is not None and max_examples < 1:
            raise ValueError(f"`max_examples` must be >= 1, got {max_examples}")
        self.dataset, self.synthetic_args, self.field_map, self.split = dataset, synthetic_args, field_map, split
        self.max_examples, self.max_new_tokens, self.batch_size = max_examples, max_new_tokens, batch_size
        self.every_n_rounds, self.template, self.seed, self.where = every_n_rounds, template, seed, where
        self.final_full = final_full
        self.history: list[dict[str, Any]] = []
        self._examples: list[dict[str, str]] | None = None
        self._name = "federation.hooks: HeldOutRouge"  # federation.hooks[i] once bound (check_server)

    def check_server(self, server: ServerRound) -> None:
        """Read the held-out set and apply ``where`` when the run is bound, before anything is written: a
        set the precheck could not read (a hub or synthetic set) is refused here, naming
        ``federation.hooks[i]`` (red team 17 B9: after round 0's evaluation, exit 1, a run folder left)."""
        hooks = list(getattr(server, "hooks", None) or [])
        index = next((i for i, h in enumerate(hooks) if h is self), None)
        if index is not None:
            self._name = f"federation.hooks[{index}]"
        self._examples = self._held_out(self.max_examples)

    def _held_out(self, max_examples: int | None) -> list[dict[str, str]]:
        return held_out_examples(
            self.dataset,
            self.synthetic_args,
            self.field_map,
            self.split,
            max_examples,
            self.seed,
            self.where,
            self._name,
        )

    def after_aggregate(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, round_idx: int
    ) -> None:
        number = round_idx + 1
        if number % self.every_n_rounds and number != server.rounds:
            return
        final = number == server.rounds and self.final_full
        if final:
            examples = self._held_out(None)
        else:
            if self._examples is None:
                self._examples = self._held_out(self.max_examples)
            examples = self._examples
        template = self.template or server.datamodule.template
        system_prompt = getattr(server.datamodule, "system_prompt", None)
        scores, answers = evaluate_rouge(
            module, examples, template, self.max_new_tokens, self.batch_size, system_prompt
        )
        self.history.append(
            {
                "round": number,
                **scores,
                "num_examples": len(examples),
                "examples": [{"reference": e["output"], "answer": a} for e, a in zip(examples[:5], answers[:5])],
            }
        )
        if context is not None and context.is_global_zero:
            for logger in context.loggers:
                logger.log_metrics({f"round/{k}": v for k, v in scores.items()}, step=number)
            from lightning_fed.federation.report import RoundReport

            (RoundReport.output_dir(context) / "rouge.json").write_text(json.dumps(self.history, indent=1))

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = list(state.get("history", []))
