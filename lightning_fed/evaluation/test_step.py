"""Per-example metrics of ``lightning-fed test`` (and ``validate``), for every objective.

:func:`evaluation_metrics` adds to what a module's ``validation_step`` returns:

* preference batches (``chosen_*``/``rejected_*``) of a module with ``sequence_log_probs``
  (every DPO-family module; personalized ones score with the client's personal parts):
  ``pref_acc_sum`` (``log p(y_w|x) > log p(y_l|x)``, summed log-probs, FedPDPO's metric) and
  ``pref_acc_norm`` (the same on log-probs divided by the number of response tokens, so a
  longer response is not penalised for its length);
* instruction batches (``input_ids``/``labels``) of a module with a generating ``model``:
  ``rouge1``, ``rouge2``, ``rougeL`` F-measures of the greedy answer to the prompt part
  against the reference response (the labelled part), at most as many new tokens as the
  longest reference in the batch.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from lightning_fed.datamodules.tokenize import IGNORE_INDEX  # the same -100 as modules.losses
from lightning_fed.evaluation.generation import generate_from_ids
from lightning_fed.evaluation.rouge import ROUGE_TYPES, rouge_per_example


def response_lengths(labels: Tensor) -> Tensor:
    """Scored tokens per sequence (``labels != IGNORE_INDEX``, the first position never is)."""
    return (labels[:, 1:] != IGNORE_INDEX).sum(-1).clamp(min=1)


def preference_metrics(chosen: Tensor, rejected: Tensor, chosen_len: Tensor, rejected_len: Tensor) -> dict[str, Tensor]:
    """Summed and length-normalised preference accuracy of ``(B,)`` sequence log-probs (ties are wrong)."""
    return {
        "pref_acc_sum": (chosen > rejected).float(),
        "pref_acc_norm": (chosen / chosen_len > rejected / rejected_len).float(),
        "logp_margin": (chosen - rejected).float(),
    }


def instruction_rouge(module: Any, batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """ROUGE-1/2/L of the module's greedy answers against the batch's reference responses."""
    tok = module.tokenizer
    prompts, references = [], []
    for ids, labels, mask in zip(
        batch["input_ids"].tolist(), batch["labels"].tolist(), batch["attention_mask"].tolist()
    ):
        n = sum(mask)
        start = next((j for j in range(n) if labels[j] != IGNORE_INDEX), n)
        prompts.append(ids[:start])
        references.append([t for t in labels[start:n] if t != IGNORE_INDEX])
    longest = max((len(r) for r in references), default=1)
    was_training = module.model.training
    module.model.eval()
    try:
        answers = generate_from_ids(module.model, tok, prompts, max(1, longest), batch_size=len(prompts))
    finally:
        module.model.train(was_training)
    refs = [tok.decode(r, skip_special_tokens=True) for r in references]
    scores = rouge_per_example(answers, refs, ROUGE_TYPES)
    return {k: torch.tensor(v, dtype=torch.float32) for k, v in scores.items()}


def extra_metrics(module: Any, batch: dict[str, Tensor]) -> dict[str, Tensor]:
    """The metrics above for one batch (empty for other kinds of batch, e.g. selector pairs)."""
    out: dict[str, Tensor] = {}
    if "chosen_input_ids" in batch and hasattr(module, "sequence_log_probs"):
        chosen, rejected = module.sequence_log_probs(batch)
        lengths = response_lengths(batch["chosen_labels"]), response_lengths(batch["rejected_labels"])
        out.update(preference_metrics(chosen.detach().float(), rejected.detach().float(), *lengths))
    elif "input_ids" in batch and "labels" in batch and hasattr(getattr(module, "model", None), "generate"):
        out.update(instruction_rouge(module, batch))
    return out


def evaluation_metrics(module: Any, batch: dict[str, Tensor], batch_idx: int = 0) -> dict[str, Tensor]:
    """``module.validation_step``'s per-example metrics plus :func:`extra_metrics`."""
    out = {**(module.validation_step(batch, batch_idx) or {}), **extra_metrics(module, batch)}
    return {k: v.detach().float().cpu() for k, v in out.items() if torch.is_tensor(v) and v.dim() == 1}
