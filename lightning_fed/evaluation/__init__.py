"""Evaluation: preference accuracy per client, personalised evaluation, win rate, reports.

The names below are loaded on first use (PEP 562), so that importing one evaluation module
(e.g. ``evaluation.test_step`` from ``modules.base``) does not import the win-rate judges and
through them the modules package: no import circle (``tests/test_import_graph.py``). The
``win_rate`` function is ``lightning_fed.evaluation.win_rate.win_rate`` (its module's name).
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "PersonalizedEvaluation": "personalized",
    "client_accuracy": "preference",
    "preference_accuracy": "preference",
    "SelectorJudge": "win_rate",
    "WinRate": "win_rate",
    "policy_win_rate": "win_rate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
