"""The option rules of the strategy wrappers, without torch (issue 41: a config error before torch).

:class:`~lightning_fed.privacy.ClientLevelDP` and
:class:`~lightning_fed.deploy.secure_aggregation.SecureAggregation` wrap another strategy, so their
options are not ``federation.strategy.<option>`` rules of :mod:`lightning_fed.option_rules` (a
wrapper may sit inside another: ``SecureAggregation(ClientLevelDP(FedAdam))``); each class raises
``ValueError("; ".join(problems))``, each problem naming its option ``federation.strategy.<option>``
(the precheck names where the wrapper is: ``federation.strategy.strategy.<option>`` inside another;
what is wrong with the wrapped strategy itself starts ``<Class>:``). The functions here list those problems; the
classes call them in their ``__init__`` and the precheck (:func:`wrapper_problem`, from
:mod:`lightning_fed.config_values`) calls them on the merged config, so a
``noise_multiplier: -1`` is refused in a fraction of a second with the line the class raises
after 10-15 s of imports. A wrapped strategy of the package's is checked too: its class (the ones
a wrapper cannot wrap, :data:`CLIENT_DP_UNSUPPORTED`) and its own rules
(:func:`lightning_fed.class_sections.class_problem`); so are ClientLevelDP's ``adaptive`` values
(:func:`adaptive_problems`, which :class:`~lightning_fed.privacy.AdaptiveClipping` raises with) and
``federation.compression`` under SecureAggregation (:func:`secure_compression_problem`, the run
check's line). :func:`wrapped_sections` names each wrapped strategy's option
(``federation.strategy.strategy``) so that :class:`lightning_fed.config_values.Merged` refuses an
unknown option or ``class_path`` in it as in the top-level strategy, and
:func:`adaptive_key_problem` an unknown key of ``adaptive``.

Values are taken as the CLI's parser hands them over (an integer given for a ``float`` option is a
float); a value of the wrong type is named with the class's line rather than left to fail inside
a comparison. Imports nothing heavy: :mod:`lightning_fed.class_paths` reads sources only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from lightning_fed.yaml_reading import numbers_read

STRATEGY = "federation.strategy"
"""Where a wrapper's options are named by its class, which does not know whether it is wrapped itself
(the precheck names the place it was given: ``federation.strategy.strategy`` inside another)."""

CLIENT_DP_UNSUPPORTED = {
    "FedNova": "it normalises each client's update by that client's own step count",
    "FedAMP": "it builds a personalised aggregate from each client's individual model",
    "CoordinateMedian": "a median of individual updates is not a sum",
    "TrimmedMean": "a trimmed mean of individual updates is not a sum",
    # Rank-heterogeneous LoRA: clients of different ranks send tensors of different shapes, which
    # have no common sum to noise (and the server re-factors or stacks individual updates).
    "HetLoRA": "its clients send LoRA factors of different ranks, which have no common sum to noise",
    "FlexLoRA": "it averages each client's own product B A and re-factors it; no common sum to noise",
    "FLoRA": "it stacks each client's individual factors; no common sum to noise",
}
"""Strategies that aggregate individual updates, not a mean: no Gaussian-sum DP for them."""

PROTOCOLS = ("secagg+",)
"""SecureAggregation's ``protocol``."""

ADAPTIVE = ("lightning_fed.privacy.adaptive_clipping", "AdaptiveClipping")
"""(module, dataclass) of ClientLevelDP's ``adaptive`` option."""
CLIENT_DP = ("lightning_fed.privacy", "ClientLevelDP")
SECURE_AGGREGATION = ("lightning_fed.deploy", "SecureAggregation")
"""(package, class name) of each wrapper: a ``class_path`` names it by the name alone or by a
dotted path inside that package."""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_float(value: Any) -> Any:
    """A ``float`` option as the parser hands it to the class: an integer becomes a float."""
    return float(value) if _number(value) and isinstance(value, int) else value


def client_dp_problems(
    noise_multiplier: Any = None,
    clip_norm: Any = 0.1,
    expected_clients: Any = None,
    control_scale: Any = 1.0,
    key: str = STRATEGY,
) -> list[str]:
    """ClientLevelDP's refused numbers, each one line naming ``<key>.<option>`` (:data:`STRATEGY`), in
    the order the class reports them."""
    out = []
    if noise_multiplier is not None and not (_number(noise_multiplier) and noise_multiplier >= 0):
        out.append(f"{key}.noise_multiplier must be >= 0, got {noise_multiplier!r}")
    if not (_number(clip_norm) and clip_norm > 0):
        out.append(f"{key}.clip_norm must be > 0, got {clip_norm!r}")
    if expected_clients is not None and not (_number(expected_clients) and expected_clients > 0):
        out.append(f"{key}.expected_clients must be > 0, got {expected_clients!r}")
    if not (_number(control_scale) and control_scale > 0):
        out.append(f"{key}.control_scale must be > 0, got {control_scale!r}")
    return out


def adaptive_problems(
    target_quantile: Any = 0.5, learning_rate: Any = 0.2, count_stddev: Any = None, key: str = STRATEGY
) -> list[str]:
    """:class:`~lightning_fed.privacy.AdaptiveClipping`'s refused numbers (ClientLevelDP's ``adaptive``),
    each one line naming ``<key>.adaptive.<option>``, in the order the class reports them."""
    out = []
    if not (_number(target_quantile) and 0.0 <= target_quantile <= 1.0):
        out.append(f"{key}.adaptive.target_quantile must be in [0, 1], got {target_quantile!r}")
    if not (_number(learning_rate) and learning_rate > 0):
        out.append(f"{key}.adaptive.learning_rate must be > 0, got {learning_rate!r}")
    if count_stddev is not None and not (_number(count_stddev) and count_stddev >= 0):
        out.append(f"{key}.adaptive.count_stddev must be >= 0, got {count_stddev!r}")
    return out


def count_noise_problem(noise_multiplier: Any, count_stddev: Any, key: str = STRATEGY) -> str | None:
    """ClientLevelDP's ``adaptive.count_stddev`` 0 beside a noise multiplier that is not 0 (given, or
    ``None``: ``federation.privacy``'s, above 0): adaptive clipping needs ``2 * count_stddev >
    noise_multiplier`` (:func:`~lightning_fed.privacy.adaptive_clipping.update_noise_multiplier`), which no
    noise multiplier above 0 meets. Red team 10 row 6c: refused once the run was bound, two lines, no
    option path. A count without noise beside no noise at all (``noise_multiplier: 0``) stays allowed."""
    if not (_number(count_stddev) and count_stddev == 0) or (_number(noise_multiplier) and noise_multiplier == 0):
        return None
    return (
        f"{key}.adaptive.count_stddev must be > 0 with a noise multiplier above 0 (adaptive clipping needs"
        f" 2 * count_stddev > noise_multiplier), got {count_stddev!r}"
    )


def count_split_line(
    count_stddev: float,
    noise_multiplier: float,
    key: str = STRATEGY,
    given: str | None = None,
    calibrated: str | None = None,
) -> str:
    """The line refusing ClientLevelDP's ``adaptive.count_stddev`` (``sigma_b``, given or ``m / 20``) that
    cannot share the client-level noise multiplier ``z`` (``2 * sigma_b <= z``,
    :func:`~lightning_fed.privacy.adaptive_clipping.update_noise_multiplier`): the class's when the run is
    bound, the early check's (:mod:`lightning_fed.noise_calibration`) after the precheck. Red team 10
    (zz_cs01): two lines naming no option path. ``given``: the option that gave ``z``
    (``federation.privacy.noise_multiplier``), named with its value and advised instead of a budget;
    ``None`` for a ``z`` calibrated from ``federation.privacy.target_epsilon`` (issue 41, M10: the
    line advised a larger ``target_epsilon`` to a run that gave its noise multiplier). ``calibrated``: the
    budget ``z`` was calibrated for, its options with their values (the precheck names where each came from,
    :func:`lightning_fed.config_precheck.with_sources`; red team 15 M8: the file that set the budget was not
    named)."""
    s, z = float(count_stddev), float(noise_multiplier)
    if given is not None:  # each `<option>=<value>` is followed by its source in the precheck's line
        return (
            f"{key}.adaptive.count_stddev={s:g} is too small for the client-level noise multiplier {given}={z:g}:"
            f" adaptive clipping needs 2 * count_stddev > noise_multiplier; raise count_stddev above {z / 2:.4g},"
            f" or lower {given}"
        )
    for_budget = f" calibrated for {calibrated}" if calibrated is not None else ""
    return (
        f"{key}.adaptive.count_stddev={s:g} is too small for the client-level noise multiplier {z:.4g}{for_budget}"
        f" (adaptive clipping needs 2 * count_stddev > noise_multiplier): raise count_stddev above {z / 2:.4g},"
        " or lower the noise multiplier (a larger federation.privacy.target_epsilon)"
    )


SPLIT = re.compile(r"[\w.]+\.adaptive\.count_stddev=\S+ is too small for the client-level noise multiplier ")
"""A :func:`count_split_line`."""


def is_count_split_line(problem: str) -> bool:
    """Whether ``problem`` is a :func:`count_split_line`: the precheck follows each value in it with where it
    came from (:func:`lightning_fed.config_precheck.with_sources`)."""
    return SPLIT.match(problem) is not None


def wrapped_problem(name: str, already_private: bool = False) -> str | None:
    """ClientLevelDP around a strategy named ``name`` that cannot sit behind a Gaussian sum."""
    if name in CLIENT_DP_UNSUPPORTED or already_private:
        return f"strategy {name} cannot be wrapped: {CLIENT_DP_UNSUPPORTED.get(name, 'it is already private')}"
    return None


def secure_aggregation_problems(
    protocol: Any = "secagg+",
    num_shares: Any = 1.0,
    reconstruction_threshold: Any = 0.5,
    max_weight: Any = 1000.0,
    clipping_range: Any = 8.0,
    quantization_range: Any = 2**22,
    modulus_range: Any = 2**32,
    wrapped: list[str] | None = None,
    key: str = STRATEGY,
    adaptive: Mapping[str, Any] | None = None,
) -> list[str]:
    """SecureAggregation's refused settings, each one line naming ``<key>.<option>``, in the class's
    order (``wrapped``: what is wrong with its wrapped strategy, :func:`secure_sum_problem`'s lines, said after
    the protocol, as ``SecureAggregation: <what>``; ``adaptive``: the wrapped ClientLevelDP's adaptive
    clipping, every option of it, :func:`adaptive_secure_sum_problem`)."""
    out = []
    if protocol not in PROTOCOLS:
        out.append(f"{key}.protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if adaptive is not None:
        out.append(adaptive_secure_sum_problem(adaptive, key))
    out += wrapped or []
    shares_int = isinstance(num_shares, int) and not isinstance(num_shares, bool)
    if not _number(num_shares) or not (num_shares > 2 if shares_int else 0 < num_shares <= 1):
        out.append(f"{key}.num_shares must be an int > 2 or a fraction in (0, 1], got {num_shares!r}")
    threshold = reconstruction_threshold
    bad_int = (
        isinstance(threshold, int)
        and not isinstance(threshold, bool)
        and not (1 < threshold and (not shares_int or threshold < num_shares))
    )
    if not _number(threshold) or bad_int or (isinstance(threshold, float) and not 0 < threshold <= 1):
        out.append(
            f"{key}.reconstruction_threshold must be an int in [2, num_shares) or a fraction in (0, 1],"
            f" got {threshold!r}"
        )
    if not (_number(max_weight) and max_weight > 0):
        out.append(f"{key}.max_weight must be > 0, got {max_weight!r}")
    if not (_number(clipping_range) and clipping_range > 0):
        out.append(f"{key}.clipping_range must be > 0, got {clipping_range!r}")
    if not isinstance(quantization_range, int) or isinstance(quantization_range, bool) or quantization_range <= 0:
        out.append(f"{key}.quantization_range must be an int > 0, got {quantization_range!r}")
    elif (
        not isinstance(modulus_range, int)
        or isinstance(modulus_range, bool)
        or modulus_range <= quantization_range
        or modulus_range > 2**32
        or bin(modulus_range).count("1") != 1
    ):
        out.append(
            f"{key}.modulus_range must be a power of 2 in (quantization_range, 2**32], got {modulus_range!r}"
            " (Flower samples masks below it as int64)"
        )
    return out


def adaptive_secure_sum_problem(adaptive: Mapping[str, Any], key: str = STRATEGY) -> str:
    """SecureAggregation (at ``key``) around ClientLevelDP with ``adaptive`` set (``adaptive``: every
    option of :class:`~lightning_fed.privacy.AdaptiveClipping`, the defaults filled in, as the class and
    the precheck both know it). Red team 10 row 12: the line named no option."""
    return (
        f"{key}.strategy.adaptive: ClientLevelDP's adaptive clipping cannot run under SecureAggregation (its"
        f" noised count is not summed securely); drop adaptive, got {dict(adaptive)}"
    )


def secure_compression_problem(compression: Any) -> str:
    """``federation.compression`` under SecureAggregation (a strategy with ``secure_sum``): the run's
    line (:func:`lightning_fed.run_checks.run_problem`), said by the precheck too."""
    return (
        f"federation.compression={compression!r} cannot run under federation.strategy=SecureAggregation:"
        " the server sees only the masked sum of the updates, so it cannot decode each client's compressed"
        " upload (SecAgg+ quantizes the updates itself); drop federation.compression"
    )


def compression_problem(federation: Any, strategy: Any) -> str | None:
    """:func:`secure_compression_problem` where the merged ``federation:`` section sets a compression
    and ``federation.strategy`` is SecureAggregation, else ``None``."""
    compression = federation.get("compression") if isinstance(federation, Mapping) else None
    section = _section(strategy)
    if not compression or section is None or _wrapper(section["class_path"]) != "SecureAggregation":
        return None
    return secure_compression_problem(compression)


def secure_sum_problem(name: str, key: str = STRATEGY, inside_client_dp: bool = False) -> str:
    """SecureAggregation (at ``key``) around a strategy named ``name`` that needs more than the mean,
    itself or inside a ClientLevelDP, each named by its option (issue 41: ``SecureAggregation: strategy
    FedBuff cannot run on a secure sum``, no option path)."""
    where = f"{key}.strategy.strategy" if inside_client_dp else f"{key}.strategy"
    return (
        f"{where}={name} cannot run under {key}=SecureAggregation: the server gets only the sum of the updates"
        " (supported: FedAvg, FedProx, FedAvgM, FedAdagrad, FedYogi, FedAdam, optionally inside ClientLevelDP)"
    )


# ------------------------------------------------------------------------------ the precheck
def _wrapper(class_path: str) -> str | None:
    """``ClientLevelDP`` / ``SecureAggregation`` if ``class_path`` names that wrapper, else ``None``."""
    module, _, name = class_path.rpartition(".")
    for package, wrapper in (CLIENT_DP, SECURE_AGGREGATION):
        if name == wrapper and (not module or module == package or module.startswith(package + ".")):
            return wrapper
    return None


def _numeric_word(value: Any) -> bool:
    """A string the parser may still read as a number (``"1e-3"``, which PyYAML leaves a string):
    not checked here. Any other word for a number is certainly refused."""
    if not isinstance(value, str):
        return False
    try:
        float(value.replace("_", ""))
    except ValueError:
        return False
    return True


def _section(value: Any) -> dict[str, Any] | None:
    """A strategy given as a name or ``{class_path, init_args}``, as ``{class_path, init_args}``."""
    if isinstance(value, str):
        return {"class_path": value, "init_args": {}}
    if isinstance(value, Mapping) and isinstance(value.get("class_path"), str):
        init = value.get("init_args")
        return {"class_path": value["class_path"], "init_args": dict(init) if isinstance(init, Mapping) else {}}
    return None


def _package_strategy(class_path: str) -> str | None:
    """The name of the package's strategy ``class_path`` names (short or under ``lightning_fed.strategies``)."""
    from lightning_fed.option_rules import STRATEGY_RULES

    module, _, name = class_path.rpartition(".")
    if module and not (module == "lightning_fed.strategies" or module.startswith("lightning_fed.strategies.")):
        return None
    return name if name in STRATEGY_RULES else None


def wrapper_problem(strategy: Any, key: str = "federation.strategy") -> str | None:
    """The line a wrapper given as ``federation.strategy`` (``{class_path, init_args}``, merged; at
    ``key``: ``federation.strategy.strategy`` for one a wrapper wraps) refuses its options with, or
    ``None`` (not a wrapper, or nothing certain)."""
    section = _section(strategy)
    if section is None or (wrapper := _wrapper(section["class_path"])) is None:
        return None
    init_args = numbers_read(section["init_args"])  # a quoted number is the number (red team 16 B04)
    args = {k: v for k, v in init_args.items() if k in ("protocol", "strategy") or not _numeric_word(v)}
    inner = _section(args.get("strategy"))
    if problem := inner_problem(inner, f"{key}.strategy"):  # the parser builds the wrapped strategy first
        return problem
    if wrapper == "ClientLevelDP" and (problem := _adaptive_shape_problem(args.get("adaptive"), f"{key}.adaptive")):
        return problem
    if wrapper == "ClientLevelDP" and (found := adaptive_problems(**_adaptive_values(args.get("adaptive")), key=key)):
        return "; ".join(found)  # the parser builds AdaptiveClipping before the wrapper
    out: list[str] = []
    names = ("noise_multiplier", "clip_norm", "expected_clients", "control_scale")
    if wrapper == "ClientLevelDP":
        if inner is not None and (name := _package_strategy(inner["class_path"])):
            if problem := wrapped_problem(name):
                out.append(f"ClientLevelDP: {problem}")
        elif inner is not None and _wrapper(inner["class_path"]) == "ClientLevelDP":
            out.append(f"ClientLevelDP: {wrapped_problem('ClientLevelDP', already_private=True)}")
        out += client_dp_problems(**{k: _as_float(args[k]) for k in names if k in args}, key=key)
        count_stddev = _adaptive_values(args.get("adaptive")).get("count_stddev")
        if not out and (problem := count_noise_problem(_as_float(args.get("noise_multiplier")), count_stddev, key)):
            out.append(problem)
    else:
        floats = ("max_weight", "clipping_range")
        given = {
            k: _as_float(v) if k in floats else v
            for k, v in args.items()
            if k in ("protocol", "num_shares", "reconstruction_threshold", "quantization_range", "modulus_range")
            or k in floats
        }
        out += secure_aggregation_problems(
            **given, wrapped=_secure_sum_wrapped(inner, key), key=key, adaptive=_adaptive_under_secure_sum(inner)
        )
    return "; ".join(out) if out else None


def _secure_sum_wrapped(inner: dict[str, Any] | None, key: str = STRATEGY) -> list[str]:
    """What SecureAggregation (at ``key``) refuses in its wrapped strategy, where the config makes it certain."""
    if inner is None:
        return []
    out = []
    inside_client_dp = _wrapper(inner["class_path"]) == "ClientLevelDP"
    if inside_client_dp:
        inner = _section(inner["init_args"].get("strategy"))
        if inner is None:
            return out
    name = _package_strategy(inner["class_path"])
    if name is not None and name not in _secure_sum_family():
        out.append(secure_sum_problem(name, key, inside_client_dp))
    return out


def _adaptive_under_secure_sum(inner: dict[str, Any] | None) -> dict[str, Any] | None:
    """The options of the adaptive clipping of a ClientLevelDP that SecureAggregation wraps (``inner``),
    defaults filled in (:func:`adaptive_secure_sum_problem`), or ``None`` without one."""
    if inner is None or _wrapper(inner["class_path"]) != "ClientLevelDP":
        return None
    adaptive = inner["init_args"].get("adaptive")
    if adaptive is None:
        return None
    from lightning_fed.class_parameters import dataclass_defaults

    return {**dataclass_defaults(*ADAPTIVE), **_adaptive_values(adaptive)}


def _secure_sum_family() -> set[str]:
    """The package's strategies a secure sum supports: FedAvg and its subclasses, but FedNova's family."""
    from lightning_fed.class_paths import package_subclasses

    nova = {"FedNova"} | package_subclasses("FedNova")
    return ({"FedAvg"} | package_subclasses("FedAvg")) - nova


def inner_problem(inner: dict[str, Any] | None, key: str = "federation.strategy.strategy") -> str | None:
    """The wrapped strategy's own refusal: a wrapper's (:func:`wrapper_problem`) or the package's
    strategy's rules (:func:`~lightning_fed.class_sections.class_problem`, whose lines name the option
    ``federation.strategy.<option>`` as the class does: here renamed to where it is, ``key``, as
    ``federation.strategy.strategy.beta_1``; red team 8 row 12)."""
    if inner is None:
        return None
    if _wrapper(inner["class_path"]) is not None:
        return wrapper_problem(inner, key)
    from lightning_fed.class_sections import class_problem

    problem = class_problem("federation.strategy", inner)
    return problem.replace("federation.strategy.", f"{key}.") if problem else None


def _adaptive_shape_problem(adaptive: Any, option: str) -> str | None:
    """ClientLevelDP's ``adaptive`` given as neither a mapping nor ``null`` (``[0.5]``, ``true``): the
    live parser's line (:func:`lightning_fed.errors.simplify_parse_error`), after the imports."""
    if adaptive is None or isinstance(adaptive, (Mapping, str)):
        return None  # a word: the parser may still read it (null)
    from lightning_fed.class_parameters import dataclass_fields

    keys = ", ".join(dataclass_fields(*ADAPTIVE) or ())
    return f"{option} must be a mapping with keys {keys}, got {adaptive!r}"


def _adaptive_init_args(adaptive: Any) -> dict[str, Any] | None:
    """ClientLevelDP's ``adaptive`` given as a mapping of its options or as ``{class_path, init_args}``,
    as that mapping; ``None`` where not followed here."""
    if not isinstance(adaptive, Mapping):
        return None
    if "class_path" in adaptive:
        init = adaptive.get("init_args", {})
        return dict(init) if isinstance(init, Mapping) else None
    return dict(adaptive)


def _adaptive_values(adaptive: Any) -> dict[str, Any]:
    """The options of ``adaptive`` :func:`adaptive_problems` checks, as the parser hands them over."""
    given = numbers_read(_adaptive_init_args(adaptive) or {})  # a quoted number is the number
    names = ("target_quantile", "learning_rate", "count_stddev")
    return {k: _as_float(v) for k, v in given.items() if k in names and not _numeric_word(v)}


def wrapped_sections(strategy: Any, key: str = "federation.strategy") -> Iterator[tuple[str, dict[str, Any]]]:
    """``(option, {class_path, init_args})`` of each strategy the wrapper given as ``strategy`` wraps,
    outermost first (``federation.strategy.strategy``, then ``...strategy.strategy``), named as the
    precheck names options (without ``init_args``)."""
    section = _section(strategy)
    for _ in range(8):  # a wrapper inside a wrapper inside...: as deep as a config plausibly goes
        if section is None or _wrapper(section["class_path"]) is None:
            return
        key, section = f"{key}.strategy", _section(section["init_args"].get("strategy"))
        if section is not None:
            yield key, section


def wrapper_at(strategy: Any, key: str) -> str | None:
    """The wrapper (``ClientLevelDP`` / ``SecureAggregation``) at option ``key`` (``federation.strategy``,
    ``federation.strategy.strategy``...) of the strategy given as ``strategy``, or ``None``: the option
    ``<key>.strategy`` (and its ``--<key>.strategy.help CLASS``) is a strategy then."""
    section = dict([("federation.strategy", _section(strategy)), *wrapped_sections(strategy)]).get(key)
    return _wrapper(section["class_path"]) if section is not None else None


def adaptive_key_problem(strategy: Any) -> str | None:
    """An option ClientLevelDP's ``adaptive`` (:class:`~lightning_fed.privacy.AdaptiveClipping`) does not
    take, in the wrapper given as ``strategy`` or one it wraps, named with the closest (the live
    parser's ``Option 'count_stdev' is not accepted``, after the imports, named neither)."""
    from lightning_fed.class_parameters import dataclass_fields
    from lightning_fed.value_rules import unknown_key

    items = [("federation.strategy", _section(strategy)), *wrapped_sections(strategy)]
    for key, section in items:
        if section is None or _wrapper(section["class_path"]) != "ClientLevelDP":
            continue
        given = _adaptive_init_args(section["init_args"].get("adaptive"))
        accepted = dataclass_fields(*ADAPTIVE)
        for name in given or {}:
            if accepted is not None and str(name) not in accepted:
                return unknown_key(f"{key}.adaptive", ADAPTIVE[1], str(name), list(accepted))
    return None
