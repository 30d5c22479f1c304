"""The client-level noise multiplier a config plans, by Opacus' accountant, with torch alone imported.

``federation.privacy.target_epsilon`` alone makes the run calibrate ``z`` for its rounds
(:meth:`~lightning_fed.privacy.PrivacyConfig.plan`: Opacus' ``get_noise_multiplier``, a bisection on
its accountant); ClientLevelDP's adaptive clipping then needs ``2 * count_stddev > z``
(:func:`~lightning_fed.privacy.adaptive_clipping.update_noise_multiplier`, Theorem 1 of Andrew et al.).
Red team 10's zz_cs01 (``count_stddev: 0.1`` with ``target_epsilon: 8``, ``z`` = 0.754) was refused
when the run was bound, after Lightning, transformers and PEFT were imported and the model built
(17 s of CPU), in two lines naming no option and no file. :func:`count_split_problem` makes the same
plan from the merged config right after the precheck, with Opacus (and so torch) imported but not
Lightning (:func:`lightning_fed.federation.early_check.precheck_noise`), and refuses it in one line
naming ``federation.strategy.adaptive.count_stddev`` and the file; a ``z`` given
(``federation.privacy.noise_multiplier``) is held against it by the precheck, before torch. A
calibrated ``z`` cannot be known before torch: Opacus imports it. Nothing here computes a privacy
loss: :func:`opacus_noise_multiplier` is Opacus' calibration, the one the run uses
(:mod:`lightning_fed.privacy.accountant` calls it, so a process calibrates a setting once).
"""

from __future__ import annotations

from dataclasses import fields
from functools import lru_cache
from typing import Any

from lightning_fed.yaml_reading import numbers_read

#: What to change when the client-level budget cannot be met (the default of
#: :func:`~lightning_fed.privacy.accountant.calibrate_noise_multiplier`).
CLIENT_LEVEL_HINT = (
    "raise federation.privacy.target_epsilon or federation.privacy.delta, lower federation.rounds, or sample"
    " fewer clients (federation.sampling: poisson, with a smaller federation.sampling_rate)"
)

MAX_DEFAULT_DELTA = 1e-5
"""The largest default ``delta``: ``1 / N**1.1`` alone is no guarantee for a few clients (N = 4
gives 0.22, at which Opacus' RDP epsilon of any noise multiplier >= 5 is <= 0, so every budget,
however small, would be "met"); the usual ``1e-5`` caps it."""


def default_delta(num_clients: int) -> float:
    """``min(1 / N**1.1, 1e-5)`` (McMahan et al. 2018 take ``N**-1.1`` for N in the hundreds of thousands)."""
    return min(1.0 / float(max(int(num_clients), 1)) ** 1.1, MAX_DEFAULT_DELTA)


MAX_NOISE_MULTIPLIER = 100.0
"""The largest noise multiplier a budget is calibrated to (``rdp`` accountant). Opacus'
``get_noise_multiplier`` brackets ``z`` by doubling from 20 until the budget is met or ``z`` passes
1e6, then bisects to within 0.01 of the budget; each step is one epsilon of its accountant, whose cost
grows with ``z`` at a sample rate below 1 (0.6 s at ``z`` 100, 1.6 s at 1000 for rate 0.5 over 10
rounds). A budget just above :func:`rdp_floor` needs ``z`` growing without bound as it nears the floor
(``floor + 1e-4``: ``z`` 1280, 8 s of CPU; ``floor + 1e-6``: 10240, 12 s; the floor itself: 52 s to
the cap). The noise on a mean of ``m`` updates clipped to ``C`` has standard deviation ``z C / m``: at
``z`` 100 that is ``C / 10`` even for a thousand clients a round (or examples a batch), beyond any
published setting. A budget that needs more is refused, the line giving the smallest epsilon reachable
at ``z`` = 100 (one epsilon of Opacus' accountant); the calibration of any other stays Opacus' own, its
doubling stopped by ``z`` 160."""


MIN_NOISE_MULTIPLIER = 0.1
"""The smallest noise multiplier a budget is calibrated to. For a budget above the epsilon of ``z`` 20,
Opacus' ``get_noise_multiplier`` bisects ``z`` down towards 0 until the epsilon is within 0.01 of the
budget: a budget no noise comes near (red team, issue 41: ``target_epsilon`` 1e300) halves ``z`` until it
underflows to 0, whose epsilon is infinite, and the search never ends (a minute of CPU, no line, until
killed); its PRV accountant needs gigabytes at ``z`` near 0.1 over a thousand steps. At ``z`` 0.1 the noise
on the sum is a tenth of one client's clipped update: RDP's epsilon is in the hundreds to thousands (511
for ``feddpo_dp``'s rate 0.25 over 10 rounds, 655 at rate 1). A budget above the RDP epsilon of ``z`` 0.1
(one evaluation, :func:`largest_budget`; for the PRV accountant too, whose epsilon is below RDP's) is
refused at once, the line naming that largest budget (:func:`refused_budget_line`); a run that wants less
noise gives its noise multiplier instead of a budget."""


def _rdp_epsilon(noise_multiplier: float, delta: float, sample_rate: float, steps: int) -> float:
    """Opacus' RDP epsilon of ``steps`` steps at ``sample_rate`` with ``noise_multiplier`` (one evaluation)."""
    import warnings

    from opacus.accountants import create_accountant

    accountant = create_accountant(mechanism="rdp")
    accountant.history = [(noise_multiplier, sample_rate, steps)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Optimal order is the largest alpha"
        return float(accountant.get_epsilon(delta=delta))


def capped_epsilon(delta: float, sample_rate: float, steps: int) -> float:
    """The RDP epsilon of ``steps`` steps at ``sample_rate`` with ``z`` = :data:`MAX_NOISE_MULTIPLIER`: the
    smallest budget calibrated (Opacus' accountant, one evaluation)."""
    return _rdp_epsilon(MAX_NOISE_MULTIPLIER, delta, sample_rate, steps)


def largest_budget(delta: float, sample_rate: float, steps: int) -> float:
    """The RDP epsilon of ``steps`` steps at ``sample_rate`` with ``z`` = :data:`MIN_NOISE_MULTIPLIER`: the
    largest budget calibrated (Opacus' accountant, one evaluation)."""
    return _rdp_epsilon(MIN_NOISE_MULTIPLIER, delta, sample_rate, steps)


class AboveLargestBudget(ValueError):
    """A budget above :func:`largest_budget` (``largest``): :func:`refused_budget_line` says why."""

    def __init__(self, largest: float) -> None:
        super().__init__(f"above the largest budget calibrated, {largest:.4g}")
        self.largest = largest


def refused_budget_line(
    err: ValueError,
    target_epsilon: Any,
    delta: Any,
    steps: Any,
    sample_rate: float,
    unit: str = "rounds",
    option: str = "federation.privacy.target_epsilon",
    hint: str = CLIENT_LEVEL_HINT,
    over: str | None = None,
) -> str:
    """The one line refusing a budget :func:`opacus_noise_multiplier` refused with ``err``: above
    :func:`largest_budget` (:class:`AboveLargestBudget`: lower it, or give the noise multiplier), or reached by
    no noise multiplier (``err`` says why: above the cap, :func:`above_cap_reason`, or Opacus' "The privacy
    budget is too low."; ``hint``: what to change). The precheck's (:func:`budget_problem`) and the run's
    (:func:`~lightning_fed.privacy.accountant.calibrate_noise_multiplier`): one parameter list for both
    lines (a duplicate-code report flagged the two functions' and their callers' copies). ``over``: what the
    budget is accounted over, naming the options that set it (:func:`client_level_span`; the precheck follows
    each with its source), instead of ``over <steps> <unit> at sample rate <rate>``."""
    given = f"{option}={target_epsilon} with federation.privacy.delta={delta}"
    over = over or f"over {steps} {unit} at sample rate {sample_rate:.4g}"
    if isinstance(err, AboveLargestBudget):
        largest, noise = err.largest, f"{option.rpartition('.')[0]}.noise_multiplier"
        return (
            f"{given} is above the largest budget calibrated {over}: {largest:.4g}, the epsilon of the smallest noise"
            f" multiplier calibrated to ({MIN_NOISE_MULTIPLIER:g}); lower {option} to at most {largest:.4g}, or give"
            f" {noise} instead"
        )
    return f"{given} cannot be reached {over} by any noise multiplier ({err}); {hint}"


def above_cap_reason(smallest: float) -> str:
    """Why a budget below :func:`capped_epsilon` is refused (the ``err`` of :func:`refused_budget_line`)."""
    return (
        f"it would need one above the cap of {MAX_NOISE_MULTIPLIER:g}; the smallest epsilon reachable under it"
        f" is {smallest:.4g}"
    )


@lru_cache(maxsize=256)
def opacus_noise_multiplier(
    target_epsilon: float, delta: float, sample_rate: float, steps: int, mechanism: str
) -> float:
    """Opacus' bisection (seconds at a sample rate below 1), once per setting and process: in process,
    the precheck, the server and the clients of a simulation plan the same ``z``.

    Raises:
        ValueError: Opacus' "The privacy budget is too low.", or (``rdp``) :func:`above_cap_reason` for a
            budget that needs ``z`` above :data:`MAX_NOISE_MULTIPLIER`, refused before Opacus' search.
        AboveLargestBudget: a budget above :func:`largest_budget`, refused before Opacus' search.
    """
    from opacus.accountants.utils import get_noise_multiplier

    if target_epsilon > (largest := largest_budget(delta, sample_rate, steps)):
        raise AboveLargestBudget(largest)
    if mechanism == "rdp" and target_epsilon < (smallest := capped_epsilon(delta, sample_rate, steps)):
        raise ValueError(above_cap_reason(smallest))
    return float(
        get_noise_multiplier(
            target_epsilon=target_epsilon,
            target_delta=delta,
            sample_rate=sample_rate,
            steps=steps,
            accountant=mechanism,
        )
    )


@lru_cache(maxsize=64)
def rdp_floor(delta: float) -> float:
    """The epsilon Opacus' RDP accountant gives a mechanism with no privacy loss (every order's RDP 0) at
    ``delta``: no noise multiplier goes below it (0.1029 at ``delta`` 1e-5), so a budget at or below it is
    refused at once, where Opacus' bisection doubles ``z`` to its cap first (52 s of CPU for red team 11's
    row 14, ``target_epsilon`` 0.0001)."""
    import warnings

    from opacus.accountants.analysis.rdp import get_privacy_spent
    from opacus.accountants.rdp import RDPAccountant

    orders = RDPAccountant.DEFAULT_ALPHAS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Optimal order is the largest alpha"
        return float(get_privacy_spent(orders=orders, rdp=[0.0] * len(orders), delta=delta)[0])


def below_floor_line(target_epsilon: Any, delta: Any, floor: float, option: str = "model.dp_sgd.target_epsilon") -> str:
    """The one line refusing a budget at or below :func:`rdp_floor`: no noise multiplier, sample rate or
    number of steps reaches it, so the line names neither (DP-SGD's rate and steps are the clients' own,
    known once the data is read): the precheck's (:func:`dp_sgd_budget_problem`) and the run's
    (:meth:`~lightning_fed.privacy.example_budget.ExampleBudget.noise_multiplier_for`)."""
    return (
        f"{option}={target_epsilon} with federation.privacy.delta={delta} cannot be reached by any noise multiplier:"
        f" Opacus' RDP accountant gives no mechanism an epsilon below {floor:.4g} at this delta; raise {option}"
        f" above {floor:.4g} or federation.privacy.delta"
    )


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _federation(sections: dict[str, Any]) -> dict[str, Any]:
    """The merged ``federation:`` section, :class:`~lightning_fed.run_config.FederationConfig`'s defaults
    filled in (``privacy`` is its own section, :class:`~lightning_fed.privacy.PrivacyConfig`)."""
    from lightning_fed.run_config import FederationConfig  # no torch

    given = sections.get("federation")
    given = given if isinstance(given, dict) else {}
    return {**given, **{f.name: given.get(f.name, f.default) for f in fields(FederationConfig)}}


def _client_dp(strategy: Any) -> dict[str, Any] | None:
    """``init_args`` of the ClientLevelDP in ``federation.strategy`` (itself, or one a wrapper wraps), or ``None``."""
    from lightning_fed.wrapper_rules import _section, _wrapper, wrapped_sections

    for _, section in [("federation.strategy", _section(strategy)), *wrapped_sections(strategy)]:
        if section is not None and _wrapper(section["class_path"]) == "ClientLevelDP":
            return section["init_args"]
    return None


def _plan_rate(federation: dict[str, Any], n: int) -> tuple[float, float] | None:
    """``(m, q)``: the expected clients of a round and the sample rate the accountant uses
    (:func:`~lightning_fed.privacy.accountant.accounted_sample_rate`), or ``None`` where not certain here."""
    sampling, per_round, rate = federation["sampling"], federation["clients_per_round"], federation["sampling_rate"]
    if sampling == "fixed_size" and _number(per_round):
        return float(per_round), 1.0
    if sampling == "poisson" and _number(rate) and 0.0 < rate <= 1.0:
        return rate * n, float(rate)
    return None


def budget_problem(sections: dict[str, Any]) -> str | None:
    """The line refusing ``federation.privacy.target_epsilon`` that no noise multiplier reaches over the
    run's rounds (Opacus' calibration, as :meth:`~lightning_fed.privacy.PrivacyConfig.plan` makes it when
    the run is bound; red team 11 row 14: refused there after 52 s of CPU, in two lines), or ``None``:
    no ClientLevelDP, a ``z`` given, or a value not certain here (the run's own line)."""
    sections = numbers_read(sections)  # a quoted number is the number (yaml_reading.numbers_read)
    from lightning_fed.hook_cross_rules import num_clients_of

    init_args = _client_dp(sections.get("federation.strategy"))
    federation = _federation(sections)
    privacy, n = federation.get("privacy") or {}, num_clients_of(sections)
    if init_args is None or not isinstance(privacy, dict) or not isinstance(n, int) or isinstance(n, bool) or n < 1:
        return None
    epsilon, delta, rounds = privacy.get("target_epsilon"), privacy.get("delta"), federation["rounds"]
    accountant = privacy.get("accountant", "rdp")
    if privacy.get("noise_multiplier") is not None or init_args.get("noise_multiplier") is not None:
        return None
    if init_args.get("expected_clients") is not None or not _number(epsilon) or not epsilon > 0:
        return None
    if not _number(rounds) or rounds < 1 or (delta is not None and not (_number(delta) and 0 < delta < 1)):
        return None
    if accountant not in ("rdp", "prv") or (plan := _plan_rate(federation, n)) is None:
        return None
    d = float(delta) if delta is not None else default_delta(n)
    try:  # at or below the RDP floor too: z above MAX_NOISE_MULTIPLIER, refused before Opacus' search
        opacus_noise_multiplier(float(epsilon), d, plan[1], int(rounds), accountant)
    except ValueError as err:  # z below MIN_NOISE_MULTIPLIER or above the cap, or Opacus' "too low" (prv)
        return refused_budget_line(err, epsilon, d, int(rounds), plan[1], over=client_level_span(federation))
    return None


def client_level_span(federation: dict[str, Any]) -> str:
    """What a client-level budget is accounted over, each option with its value for the precheck to name where
    it came from (:func:`lightning_fed.config_precheck.with_sources`; red team 15 M8: ``over 2 rounds at
    sample rate 0.5`` named neither option nor file): ``federation.rounds`` and ``federation.sampling_rate``
    (Poisson), or rate 1 of ``federation.sampling=fixed_size``
    (:func:`~lightning_fed.privacy.accountant.accounted_sample_rate`)."""
    rounds, sampling, rate = federation["rounds"], federation["sampling"], federation["sampling_rate"]
    return f"over federation.rounds={rounds} {sampled_at(sampling, rate)}"


def sampled_at(sampling: str, rate: Any) -> str:
    """The accounted sample rate of a client-level budget, named by the option that sets it: ``at
    federation.sampling_rate=<rate>`` (Poisson), or ``at sample rate 1 of federation.sampling=<sampling>``."""
    if sampling == "poisson":
        return f"at federation.sampling_rate={rate:.4g}"
    return f"at sample rate 1 of federation.sampling={sampling}"


def _adaptive_client_dp(strategy: Any) -> tuple[str, dict[str, Any]] | None:
    """``(where, init_args)`` of the ClientLevelDP with adaptive clipping in ``federation.strategy``
    (itself, or one a wrapper wraps: ``federation.strategy.strategy``), or ``None``."""
    from lightning_fed.wrapper_rules import _section, _wrapper, wrapped_sections

    for key, section in [("federation.strategy", _section(strategy)), *wrapped_sections(strategy)]:
        if section is not None and _wrapper(section["class_path"]) == "ClientLevelDP":
            return (key, section["init_args"]) if section["init_args"].get("adaptive") is not None else None
    return None


def count_split_problem(sections: dict[str, Any], calibrate: bool = True) -> str | None:
    """The line refusing ClientLevelDP's ``adaptive.count_stddev`` (given, or ``m / 20``) that cannot share
    the noise multiplier (given: ``federation.privacy.noise_multiplier`` or the wrapper's own, no Opacus
    needed; or the one the run would calibrate from ``federation.privacy.target_epsilon``)
    (:func:`~lightning_fed.wrapper_rules.count_split_line`), or ``None``: no such setting, or a value not
    certain here (a data module of the user's, a budget no ``z`` reaches: the run's own line). Without
    ``calibrate`` only a given ``z`` is held (no Opacus, no torch: the precheck's,
    :meth:`lightning_fed.config_values.Merged.problem`)."""
    sections = numbers_read(sections)  # a quoted number is the number (yaml_reading.numbers_read)
    from lightning_fed.hook_cross_rules import num_clients_of
    from lightning_fed.wrapper_rules import _adaptive_values, count_split_line

    found = _adaptive_client_dp(sections.get("federation.strategy"))
    federation = _federation(sections)
    privacy, n = federation.get("privacy") or {}, num_clients_of(sections)
    if found is None or not isinstance(privacy, dict) or not isinstance(n, int) or isinstance(n, bool):
        return None
    key, init_args = found
    epsilon, given, own = (
        privacy.get("target_epsilon"),
        privacy.get("noise_multiplier"),
        init_args.get("noise_multiplier"),
    )
    client_level = epsilon is not None or given is not None
    if (client_level and own is not None) or init_args.get("expected_clients") is not None:
        return None  # z given twice, or an expected_clients: the run's own lines (client_level_plan.py)
    sampling, rounds = federation["sampling"], federation["rounds"]
    per_round, rate = federation["clients_per_round"], federation["sampling_rate"]
    if sampling == "fixed_size" and _number(per_round):
        m, q = float(per_round), 1.0  # lightning_fed/privacy/accountant.py's accounted_sample_rate
    elif sampling == "poisson" and _number(rate):
        m, q = rate * n, float(rate)
    else:
        return None
    count_stddev = _adaptive_values(init_args["adaptive"]).get("count_stddev")
    stddev = m / 20.0 if count_stddev is None else count_stddev  # AdaptiveClipping.stddev
    z = given if client_level else own  # PrivacyConfig.plan: a given z is used as it is
    option = None if z is None else "federation.privacy.noise_multiplier" if client_level else f"{key}.noise_multiplier"
    calibrated = None
    if z is None and _number(epsilon) and calibrate:
        z = _calibrated(epsilon, privacy.get("delta"), n, q, rounds, privacy.get("accountant", "rdp"))
        delta = privacy.get("delta") if privacy.get("delta") is not None else default_delta(n)
        calibrated = (
            f"federation.privacy.target_epsilon={epsilon} with federation.privacy.delta={delta}"
            f" {client_level_span(federation)}"
        )
    if not _number(stddev) or not _number(z):
        return None
    return count_split_line(stddev, z, key, option, calibrated) if z > 0 and not 2 * stddev > z else None


def _calibrated(epsilon: Any, delta: Any, num_clients: int, q: float, rounds: Any, accountant: Any) -> float | None:
    """``z`` for the budget as :meth:`~lightning_fed.privacy.PrivacyConfig.plan` calibrates it, or ``None``
    where a value is not certain here or no ``z`` reaches the budget (the run's own line)."""
    if not _number(rounds) or (delta is not None and not _number(delta)) or not isinstance(accountant, str):
        return None
    try:
        d = float(delta) if delta is not None else default_delta(num_clients)
        return opacus_noise_multiplier(float(epsilon), d, q, int(rounds), accountant)
    except ValueError:  # calibrate_noise_multiplier's line
        return None


def dp_sgd_budget_problem(sections: dict[str, Any]) -> str | None:
    """The line refusing ``model.dp_sgd.target_epsilon`` at or below the RDP floor of the run's ``delta``
    (:func:`below_floor_line`), or ``None``. On 628d0d2 the run refused it after Lightning, transformers
    and PEFT were imported, the model built and Opacus' bisection had doubled ``z`` to its cap (fedit_dpsgd
    with ``target_epsilon`` 0.0001: 18 s of CPU, two lines). Only where certain: one of the package's
    DP-SGD modules, a budget and no ``z`` given, the ``rdp`` accountant, ``delta`` given or the default
    of the package's data module's ``num_clients``."""
    sections = numbers_read(sections)  # a quoted number is the number (yaml_reading.numbers_read)
    from lightning_fed.class_kinds import package_class
    from lightning_fed.hook_cross_rules import num_clients_of
    from lightning_fed.private_run_rules import DP_MODULES

    model = sections.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("class_path"), str):
        return None
    if model["class_path"].rpartition(".")[2] not in DP_MODULES or not package_class("model", model["class_path"]):
        return None
    dp_sgd = (model.get("init_args") or {}).get("dp_sgd")
    if not isinstance(dp_sgd, dict) or dp_sgd.get("noise_multiplier") is not None:
        return None
    epsilon, privacy = dp_sgd.get("target_epsilon"), _federation(sections).get("privacy") or {}
    if not _number(epsilon) or not epsilon > 0 or not isinstance(privacy, dict):
        return None
    delta, n = privacy.get("delta"), num_clients_of(sections)
    if privacy.get("accountant", "rdp") != "rdp" or (delta is not None and not (_number(delta) and 0 < delta < 1)):
        return None
    if delta is None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        return None
    d = float(delta) if delta is not None else default_delta(n)
    floor = rdp_floor(d)
    return below_floor_line(epsilon, d, floor) if epsilon <= floor else None
