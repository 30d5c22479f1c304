"""Evaluation: preference accuracy per client, personalised evaluation, win rate, reports."""

from lightning_fed.evaluation.personalized import PersonalizedEvaluation
from lightning_fed.evaluation.preference import client_accuracy, preference_accuracy
from lightning_fed.evaluation.win_rate import SelectorJudge, WinRate, policy_win_rate, win_rate

__all__ = [
    "PersonalizedEvaluation",
    "SelectorJudge",
    "WinRate",
    "client_accuracy",
    "policy_win_rate",
    "preference_accuracy",
    "win_rate",
]
