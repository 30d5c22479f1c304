"""ROUGE between generated and reference responses (Lin, 2004), via ``rouge-score``.

Only ``rouge1``, ``rouge2`` and ``rougeL`` are offered: ``rougeLsum`` splits sentences with
nltk's punkt data, which is not installed offline. Scores are F-measures in ``[0, 1]``
(the FedHDS paper reports ``100 x`` the mean ROUGE-L F-measure). The default tokenizer of
``rouge-score`` lowercases and keeps ASCII letters and digits only.
"""

from __future__ import annotations

from collections.abc import Sequence

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


def rouge_per_example(
    predictions: Sequence[str], references: Sequence[str], types: Sequence[str] = ROUGE_TYPES, use_stemmer: bool = False
) -> dict[str, list[float]]:
    """F-measure of every (prediction, reference) pair, per ROUGE type.

    Args:
        predictions: Generated responses.
        references: Reference responses, one per prediction.
        types: Any of :data:`ROUGE_TYPES`.
        use_stemmer: Porter-stem tokens first (nltk's stemmer, which needs no data files).

    Raises:
        ValueError: On an unknown or unsupported type, or mismatched lengths.
    """
    bad = [t for t in types if t not in ROUGE_TYPES]
    if bad:
        raise ValueError(f"rouge types must be among {ROUGE_TYPES} (rougeLsum needs nltk punkt data), got {bad}")
    if len(predictions) != len(references):
        raise ValueError(f"rouge: {len(predictions)} predictions for {len(references)} references")
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(list(types), use_stemmer=use_stemmer)
    out: dict[str, list[float]] = {t: [] for t in types}
    for pred, ref in zip(predictions, references):
        scores = scorer.score(ref, pred)  # (target, prediction)
        for t in types:
            out[t].append(scores[t].fmeasure)
    return out


def rouge_scores(
    predictions: Sequence[str], references: Sequence[str], types: Sequence[str] = ROUGE_TYPES, use_stemmer: bool = False
) -> dict[str, float]:
    """Mean F-measure per ROUGE type (``0.0`` for no examples)."""
    per = rouge_per_example(predictions, references, types, use_stemmer)
    return {t: sum(v) / len(v) if v else 0.0 for t, v in per.items()}
