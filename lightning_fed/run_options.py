"""The choices and defaults of the run's options, as plain data (no torch): what
:class:`~lightning_fed.run.FederationConfig` validates against, and what the packages that
implement each option import from here (so a value is named in one place)."""

from __future__ import annotations

from lightning_fed.option_rules import EVAL_CLIENTS_CHOICES, EVALUATION, SAMPLINGS  # noqa: F401
from lightning_fed.option_rules import SCREENING_MODES as LARGE_UPDATE_MODES  # noqa: F401
from lightning_fed.option_rules import problems as rule_problems

# SAMPLINGS (``federation.sampling``), LARGE_UPDATE_MODES (``federation.on_large_update``) and
# EVAL_CLIENTS_CHOICES (``federation.eval_clients``) are declared with their value rules in
# lightning_fed/option_rules.py (what the precheck applies before torch); re-exported here.

DEFAULT_PER_CLIENT_SCALARS = 32
"""Per-client TensorBoard scalars while a round reports at most this many clients."""

DEFAULT_PANEL_SIZE = 16  # benchmarks/eval_cost.py: 12% of a round at N=1000 (32: 18%); N <= 16: every client
"""``federation.eval_panel_size``'s default."""

COMPRESSION_FIELD = "federation.compression"
QUANTIZED = {"int8": 8, "int4": 4}
"""Quantized uplinks by name: bits per value."""
COMPRESSION_EXAMPLES = "int8, int8+ef, int4, int4+ef, topk:<fraction> or topk:<fraction>-noef"


def evaluation_problems(clients: str | None, panel_size: int, every: int) -> list[str]:
    """Every invalid evaluation option, each as a one-line message naming the flag (the rules of
    :data:`~lightning_fed.option_rules.EVALUATION`, also the precheck's)."""
    values = {"eval_clients": clients, "eval_panel_size": panel_size, "eval_every": every}
    return rule_problems(EVALUATION, values)


def parse_compression(spec: str | None) -> tuple[str, float, bool] | None:
    """``(kind, amount, error_feedback)`` of a ``federation.compression`` spec: ``("quantize", bits,
    ef)`` or ``("topk", fraction, ef)``; ``None`` for no compression.

    Raises:
        ValueError: One line naming :data:`COMPRESSION_FIELD` and the value.
    """
    if spec is None:
        return None
    text = str(spec).strip()
    base, ef = (text[: -len("+ef")], True) if text.endswith("+ef") else (text, False)
    if base in QUANTIZED:
        return "quantize", QUANTIZED[base], ef
    if text.startswith("topk:"):
        value, ef = (text[5 : -len("-noef")], False) if text.endswith("-noef") else (text[5:], True)
        try:
            fraction = float(value)
        except ValueError:
            fraction = float("nan")
        if 0.0 < fraction <= 1.0:
            return "topk", fraction, ef
        raise ValueError(f"{COMPRESSION_FIELD}: the top-k fraction must be in (0, 1], got {spec!r}")
    raise ValueError(f"{COMPRESSION_FIELD} must be one of {COMPRESSION_EXAMPLES}, got {spec!r}")


def compression_problems(spec: str | None) -> list[str]:
    """``[]`` if ``spec`` names a compressor (or is ``None``), else its one-line error."""
    try:
        parse_compression(spec)
    except ValueError as err:
        return [str(err)]
    return []
