"""The ``federation:`` section's rules that :mod:`lightning_fed.option_rules` does not hold, and the
section's whole check, without torch (issue 41: a config error before torch is imported).

:data:`~lightning_fed.option_rules.FEDERATION` declares the options with a range of their own;
here are the rest of :class:`~lightning_fed.run_config.FederationConfig`'s numeric fields
(:data:`FEDERATION_MORE`), the ``federation.privacy`` section's (:data:`PRIVACY`, what
:class:`~lightning_fed.privacy.config.PrivacyConfig` refuses with) and the checks that involve two
options (:func:`federation_problems`: ``min_clients`` against ``clients_per_round``,
``sampling_rate`` against ``sampling``, ``local_steps`` or ``local_epochs``). The class and the
precheck (:mod:`lightning_fed.config_values`) call the same functions, so they refuse the same
values with the same line. ``tests/test_federation_rules.py`` reads the dataclasses' fields from
their source and fails on a numeric field without a rule here or in ``option_rules``.

Imports nothing heavy: :mod:`lightning_fed.option_rules`, :mod:`lightning_fed.run_options` and the
standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning_fed.class_parameters import fields
from lightning_fed.option_rules import FEDERATION, batch_clients_problem
from lightning_fed.run_options import compression_problems, evaluation_problems
from lightning_fed.value_rules import Rule, at_least, in_range, one_of, problems, unknown_key

SEED_MAX = 2**63 - 1
"""``federation.seed``: numpy's ``SeedSequence`` takes any integer >= 0; 63 bits, as
:func:`~lightning_fed.federation.sampling.derive_seed` gives."""

FEDERATION_MORE = (
    at_least("federation.min_clients", 1, integer=True),
    in_range("federation.sampling_rate", 0, 1, low_open=True, nullable=True),
    in_range("federation.seed", 0, SEED_MAX, integer=True, nullable=True),
    at_least("federation.max_state_memory_bytes", 0, integer=True, nullable=True),
)
""":class:`~lightning_fed.run_config.FederationConfig`'s numeric fields not in
:data:`~lightning_fed.option_rules.FEDERATION` (their upper bounds that depend on another option:
:func:`federation_problems`)."""

PRIVACY_ACCOUNTANTS = ("rdp", "prv")
"""``federation.privacy.accountant``: Opacus' accountants (``lightning_fed.privacy.accountant.MECHANISMS``,
which imports Opacus; ``tests/test_federation_rules.py`` keeps the two equal)."""

PRIVACY = (
    at_least("federation.privacy.target_epsilon", 0, low_open=True, nullable=True),
    at_least("federation.privacy.noise_multiplier", 0, low_open=True, nullable=True),
    in_range("federation.privacy.delta", 0, 1, low_open=True, high_open=True, nullable=True),
    one_of("federation.privacy.accountant", PRIVACY_ACCOUNTANTS),
)
""":class:`~lightning_fed.privacy.config.PrivacyConfig`'s (``federation.privacy:``)."""
PRIVACY_CONFIG = ("lightning_fed.privacy.config", "PrivacyConfig")
"""Where ``federation.privacy``'s dataclass is defined (its fields are read from the source)."""


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def federation_problems(values: Mapping[str, Any]) -> list[str]:
    """Every problem of a ``federation:`` section's plain fields (``values``: every field of
    :class:`~lightning_fed.run_config.FederationConfig`, defaults filled in), each one line naming
    its ``federation.`` key, in the order the class reports them."""
    out = evaluation_problems(values["eval_clients"], values["eval_panel_size"], values["eval_every"])
    ranged = problems(FEDERATION + FEDERATION_MORE, values)
    out += ranged
    refused = {p.split()[0] for p in ranged}
    steps, epochs = values["local_steps"], values["local_epochs"]
    if (steps is None) == (epochs is None):
        out.append(f"set exactly one of federation.local_steps and federation.local_epochs, got {steps} and {epochs}")
    sampling, rate = values["sampling"], values["sampling_rate"]
    if sampling == "poisson" and rate is None:
        out.append(f"federation.sampling_rate must be in (0, 1] with federation.sampling=poisson, got {rate!r}")
    elif sampling == "fixed_size" and rate is not None and "federation.sampling_rate" not in refused:
        out.append(sampling_rate_line(rate))
    least, per_round = values["min_clients"], values["clients_per_round"]
    if sampling != "poisson" and _int(least) and _int(per_round) and least >= 1 and per_round >= 1:
        if least > per_round:
            out.append(f"federation.min_clients must be in [1, clients_per_round={per_round}], got {least}")
    out.extend(compression_problems(values["compression"]))
    k = values["batch_clients"]
    if isinstance(k, float) or k is None:  # left to the live parser by the precheck, refused here
        out.append(f"federation.batch_clients must be 'off', 'auto' or an integer >= 1, got {k!r}")
    elif problem := batch_clients_problem(k):
        out.append(problem)
    return out


SAMPLING_RATE_LINE = (
    "federation.sampling_rate={rate!r} is for Poisson sampling, but federation.sampling=fixed_size;"
    " leave sampling_rate out, or set federation.sampling: poisson"
)


def sampling_rate_line(rate: Any) -> str:
    """The line refusing ``federation.sampling_rate`` with ``federation.sampling=fixed_size``: each value in
    it followed by where it came from in the precheck's line (:func:`is_sampling_rate_line`)."""
    return SAMPLING_RATE_LINE.format(rate=rate)


def is_sampling_rate_line(problem: str) -> bool:
    """Whether ``problem`` is a :func:`sampling_rate_line`: the precheck follows each of its values with the file
    that set it (:func:`lightning_fed.config_precheck.with_sources`; issue 41: ``--config feddpo_dp --config
    x.yaml`` with ``sampling: fixed_size`` in x.yaml named x.yaml for feddpo_dp.yaml's ``sampling_rate``; red
    team 15 M8: a default ``fixed_size`` was not said to be one)."""
    start, end = SAMPLING_RATE_LINE.split("{rate!r}")
    return problem.startswith(start) and problem.endswith(end)


def privacy_values(section: Any) -> Mapping[str, Any] | None:
    """The options of a ``federation.privacy`` section as a config gives them (a mapping, or
    ``class_path`` / ``init_args``), or ``None`` if there are none to check."""
    if isinstance(section, Mapping) and isinstance(section.get("init_args"), Mapping):
        return section["init_args"]
    if isinstance(section, Mapping):
        return {k: v for k, v in section.items() if k != "class_path"}
    return None


def _may_name_a_class_or_file(text: str) -> bool:
    """Whether jsonargparse may read a ``federation.privacy`` string: a file of its options, inline
    YAML, or a dotted class path (``yes`` is none: ``Expected a dot import path string``)."""
    from pathlib import Path

    parts = text.strip().split(".")
    return (
        Path(text).is_file()
        or text.lstrip().startswith("{")
        or (len(parts) > 1 and all(p.isidentifier() for p in parts))
    )


def privacy_shape_problem(section: Any) -> str | None:
    """The line refusing a ``federation.privacy`` that is no mapping (``privacy: 4``), or a key that is
    no field of :class:`~lightning_fed.privacy.config.PrivacyConfig` (``epsilon``: the closest field
    named), or ``None``. The live parser said ``Not a valid subclass of PrivacyConfig Subclass types
    expect one of:`` for both, after torch was imported."""
    if section is None or (isinstance(section, str) and _may_name_a_class_or_file(section)):
        return None
    if not isinstance(section, Mapping):
        return (
            "federation.privacy must be a mapping of its options"
            f" (federation.privacy: {{target_epsilon: 8.0, ...}}), got {section!r}"
        )
    values = privacy_values(section)
    accepted = fields(*PRIVACY_CONFIG)
    for key in values if values is not None and accepted is not None else ():
        if str(key) not in accepted:
            return unknown_key("federation.privacy", PRIVACY_CONFIG[1], str(key), list(accepted))
    return None


def privacy_problems(values: Mapping[str, Any]) -> list[str]:
    """Every refused value of ``federation.privacy`` (:data:`PRIVACY`; ``report_validation`` a bool)."""
    out = problems(PRIVACY, values)
    flag = values.get("report_validation", False)
    if not isinstance(flag, bool):
        out.append(f"federation.privacy.report_validation must be true or false, got {flag!r}")
    return out


__all__ = [
    "FEDERATION_MORE",
    "PRIVACY",
    "PRIVACY_ACCOUNTANTS",
    "Rule",
    "federation_problems",
    "privacy_problems",
    "privacy_shape_problem",
    "privacy_values",
]
