"""The value rules of the package's config options, declared once, without torch (issue 41, item 9).

Each :class:`~lightning_fed.value_rules.Rule` is one option as the user writes it (``model.lr``, ``data.num_clients``,
``federation.rounds``) with what it accepts: an integer or a number in a range (open or closed
at each end, finite), one of some choices, or also ``null``. The config classes refuse a bad
value through these rules (:func:`check`: a ``ValueError`` with the rule's one line), and
:mod:`lightning_fed.config_precheck` applies the same rules to the merged config before torch is
imported, so ``fit --config tiny --model.init_args.lr=-1`` is refused in a fraction of a second
instead of after 10-20 s of imports, with the line the class would have raised.

Which rules apply to ``model:`` and ``data:`` depends on the class: :data:`MODEL_RULES` and
:data:`DATA_RULES` are keyed by the class's name as the package exports it
(``lightning_fed.modules.DPOModule``, written ``DPOModule`` or in full). A class not listed (a
user's own) gets no precheck; the live parser decides. ``tests/test_option_rules.py`` walks the
listed classes' signatures: every parameter a class refuses a value of must be declared here, and
class and precheck must refuse each value with the same line.

The round hooks' rules (``federation.hooks:``) are in :mod:`lightning_fed.hook_rules`; :data:`SECTIONS`
and :func:`class_rules` read them from there.

Imports nothing but :mod:`lightning_fed.limits`, :mod:`lightning_fed.value_rules` (what a rule is),
:mod:`lightning_fed.hook_rules` and the standard library.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from lightning_fed.hook_rules import HOOK_PACKAGES, HOOK_RULES
from lightning_fed.limits import (
    MAX_BETA,
    MAX_CLIENTS,
    MAX_LOCAL_EPOCHS,
    MAX_LOCAL_STEPS,
    MAX_LORA_ALPHA,
    MAX_LR,
    MAX_ROUNDS,
    synthetic_rows_problem,
)
from lightning_fed.value_rules import SEED_MAX, at_least, in_range, one_of, problems
from lightning_fed.value_rules import Rule as Rule
from lightning_fed.value_rules import check as check
from lightning_fed.yaml_reading import any_value

OPTIMIZERS = ("adamw", "sgd")
"""``model.optimizer`` of every objective."""
DTYPES = ("bfloat16", "float16", "float32")
"""``model.personal_dtype`` (and ``backbone.dtype``): the torch dtypes by name, sorted."""
LAYOUTS = ("fedbiot", "offsite")
"""``model.layout`` of :class:`~lightning_fed.modules.OffsiteModule`."""
OVERFLOW_CHOICES = ("error", "truncate", "drop")
"""``data.on_overflow``: what happens to an example longer than ``data.max_length``."""
TRUNCATION_CHOICES = ("prompt_left", "prompt_middle", "response")
"""``data.truncation``: which part of a too-long example is cut."""
SAMPLINGS = ("fixed_size", "poisson")
"""``federation.sampling``."""
SCREENING_MODES = ("reject", "clip")
"""``federation.on_large_update``."""
EVAL_CLIENTS_CHOICES = ("all", "sampled", "panel")
"""``federation.eval_clients`` (``null``: a panel in ``fit``, every client in ``validate``/``test``)."""


_SEED_WORD = re.compile(r"^([-+]?[0-9][0-9_]*|true|false|yes|no|on|off)$", re.I)
"""A ``seed_everything`` string the parser may still read as an integer or a bool: left to it."""
_INTEGER = re.compile(r"^[-+]?[0-9]+$")


def batch_clients_problem(value: Any) -> str | None:
    """``federation.batch_clients`` other than ``off``, ``auto`` or an integer >= 1 (``int | str``:
    the parser takes any word, :class:`~lightning_fed.run_config.FederationConfig` refuses it with
    this line; the parser refuses a float, 1.5 or 2.0, and a YAML bool as ``Expected a <class 'int'>``,
    naming no value). A config file's unquoted ``off`` is YAML 1.1's ``false``: the line says to quote it
    (on the command line the parser keeps the word, :data:`WORD_OPTIONS`)."""
    if isinstance(value, str) and _INTEGER.match(value.strip()):
        value = int(value)
    if isinstance(value, bool):
        quote = " (YAML reads an unquoted off as false: write 'off')" if value is False else ""
        return f"federation.batch_clients must be 'off', 'auto' or an integer >= 1, got {value!r}{quote}"
    if value in ("off", "auto") or value is None:
        return None
    if isinstance(value, int) and value >= 1:
        return None
    return f"federation.batch_clients must be 'off', 'auto' or an integer >= 1, got {value!r}"


WORD_OPTIONS = ("federation.batch_clients",)
"""Options typed ``int | str``: on the command line the parser keeps a word as the word (``off``,
``true``), where a config file's YAML makes it a bool."""


def seed_problem(seed: Any) -> str | None:
    """``seed_everything`` out of numpy's bounds, named (Lightning's message names no option).
    ``true`` and ``false`` are accepted (``true``: Lightning's ``seed_everything()``, which takes
    ``PL_GLOBAL_SEED`` or else 0 since Lightning 2.0, not a random seed). A quoted integer of a config
    file (``seed_everything: "-1"``) is the integer, as the parser reads it (red team 15)."""
    if isinstance(seed, str) and _INTEGER.match(seed.strip()):
        seed = int(seed)
    if isinstance(seed, int) and not isinstance(seed, bool) and not 0 <= seed <= SEED_MAX:
        return f"seed_everything must be in [0, {SEED_MAX}], got {seed}"
    return None


def seed_type_problem(seed: Any, from_command_line: bool = False) -> str | None:
    """``seed_everything`` given as a word, a list or a mapping, which the parser refuses with
    ``Expected a <class 'bool'>`` (naming neither the option's integers nor its value); so too any string
    given on the command line (``--seed_everything='"5"'``: the parser keeps a quoted value as its text
    there, where a config file's ``"5"`` is read as 5; red team 15)."""
    if (
        (from_command_line and isinstance(seed, str))
        or isinstance(seed, float)
        or (isinstance(seed, (str, list, dict)) and not (isinstance(seed, str) and _SEED_WORD.match(seed.strip())))
    ):  # `bool | int`: 2.0 is refused by the parser too
        return (
            f"seed_everything must be an integer in [0, {SEED_MAX}], true (PL_GLOBAL_SEED, else 0) or false,"
            f" got {seed!r}"
        )
    return None


# ------------------------------------------------------------------------------- model: (objectives)
LR = in_range("model.lr", 0, MAX_LR, low_open=True)
WEIGHT_DECAY = at_least(
    "model.weight_decay", 0
)  # torch's AdamW/SGD: "Invalid weight_decay value", after a log was written
FEDERATED_MODULE = (one_of("model.optimizer", OPTIMIZERS), LR, WEIGHT_DECAY)
""":class:`~lightning_fed.modules.FederatedModule` (every objective but ``OffsiteModule``)."""
DPO_OWN = (
    in_range("model.beta", 0, MAX_BETA, low_open=True),
    at_least("model.reference_cache_bytes", 0, integer=True),
)
DPO = FEDERATED_MODULE + DPO_OWN
SIMPO_OWN = (in_range("model.beta", 0, MAX_BETA, low_open=True), at_least("model.gamma", 0))
ORPO_OWN = (at_least("model.odds_ratio_weight", 0, low_open=True),)
PERFEDAVG_OWN = (
    in_range("model.inner_lr", 0, MAX_LR, low_open=True),
    at_least("model.inner_steps", 1, integer=True),
    at_least("model.eval_adapt_steps", 0, integer=True),
    at_least("model.gradient_clip_val", 0, low_open=True, nullable=True),
)
PERSONAL_HEAD_OWN = (
    one_of("model.personal_dtype", DTYPES),
    at_least("model.gradient_clip_val", 0, low_open=True, nullable=True),
)
PERSONAL_HEAD = DPO + PERSONAL_HEAD_OWN
FEDPER_OWN = (at_least("model.shared_layers", 1, integer=True),)
FEDREP_OWN = (
    at_least("model.head_steps", 1, integer=True),
    at_least("model.lr_head", 0, low_open=True, nullable=True),
    at_least("model.lr_body", 0, low_open=True, nullable=True),
)
SELECTOR_OWN = (at_least("model.num_selectors", 1, integer=True, odd=True),)
""":class:`~lightning_fed.modules.BinarySelectorModule`'s U (FedBiscuit votes by majority: odd, never a tie)."""
OFFSITE = (one_of("model.layout", LAYOUTS), one_of("model.optimizer", OPTIMIZERS), LR, WEIGHT_DECAY)

LORA = (
    at_least("model.lora.r", 0, low_open=True, integer=True),
    in_range("model.lora.alpha", 0, MAX_LORA_ALPHA, low_open=True),
    in_range("model.lora.dropout", 0, 1, high_open=True),
)
""":class:`~lightning_fed.modules.LoraSettings`: ``model.lora`` of every objective but
``OffsiteModule``; the messages name the option as every ``model:`` option's do, its key without
``init_args`` (``model.lora.r``, as ``model.beta``)."""


def target_modules_problem(value: Any) -> str | None:
    """``model.lora.target_modules``: ``None`` (the model type's default) or a non-empty list (a
    name alone, ``target_modules: c_attn``, was the parser's ``Expected a <class 'list'>`` after the imports)."""
    if isinstance(value, (list, tuple)) and not value:
        return f"model.lora.target_modules must be None or a non-empty list, got {list(value)}"
    if value is not None and not isinstance(value, (list, tuple)):
        return f"model.lora.target_modules must be None or a non-empty list, got {value!r}"
    return None


MODEL_NESTED: dict[str, tuple[Rule, ...]] = {"lora": LORA}
"""Options of ``model:`` that are dataclasses of their own, with their rules."""

MODEL_RULES: dict[str, tuple[Rule, ...]] = {
    "FederatedModule": FEDERATED_MODULE,
    "SFTModule": FEDERATED_MODULE,
    "DPOModule": DPO,
    "SimPOModule": FEDERATED_MODULE + SIMPO_OWN,
    "ORPOModule": FEDERATED_MODULE + ORPO_OWN,
    "PerFedAvgModule": DPO + PERFEDAVG_OWN,
    "PersonalHeadDPO": PERSONAL_HEAD,
    "FedPerModule": PERSONAL_HEAD + FEDPER_OWN,
    "FedRepModule": PERSONAL_HEAD + FEDREP_OWN,
    "PDPOModule": PERSONAL_HEAD,
    "BinarySelectorModule": FEDERATED_MODULE + SELECTOR_OWN,
    "OffsiteModule": OFFSITE,
}
"""``model:``'s rules by class name (each with its base classes' rules). ``PDPOModule``'s own
options (schedules that depend on each other) are checked by the class only
(``tests/test_option_rules.py`` lists them)."""
TAKES_LORA = frozenset(MODEL_RULES) - {"OffsiteModule"}
"""The classes whose ``lora`` option is a :class:`~lightning_fed.modules.LoraSettings`."""

# ------------------------------------------------------------------------------- data:
FEDERATED_DATA = (
    in_range("data.num_clients", 1, MAX_CLIENTS, integer=True),
    at_least("data.batch_size", 1, integer=True),
    at_least("data.max_length", 2, integer=True),
    one_of("data.on_overflow", OVERFLOW_CHOICES),
    in_range("data.val_fraction", 0, 1, high_open=True),
    one_of("data.truncation", TRUNCATION_CHOICES),
)
""":class:`~lightning_fed.datamodules.FederatedDataModule` and every data module of the package."""
DATA_RULES: dict[str, tuple[Rule, ...]] = {
    name: FEDERATED_DATA
    for name in (
        "PreferenceDataModule",
        "InstructionDataModule",
        "SelectorDataModule",
        "RLFTDataModule",
        "FeedbackPreferenceDataModule",
        "FeedbackSelectorDataModule",
        "FeedbackSFTDataModule",
    )
}
SYNTHETIC_ARGS = (
    at_least("data.synthetic_args.num_clients", 1, integer=True),
    at_least("data.synthetic_args.examples_per_client", 1, integer=True),
)
"""The sizes every planted-data generator (``data.dataset: synthetic:<name>``,
:data:`lightning_fed.datamodules.synthetic.SYNTHETIC`) refuses unless positive (``check_positive``)."""


SYNTHETIC_SEED = in_range("data.synthetic_args.seed", 0, SEED_MAX, integer=True)
"""A planted-data generator's ``seed``, bounded as ``seed_everything`` (an integer out of numpy's bounds only:
the generator takes what numpy takes)."""


def synthetic_problem(init_args: Mapping[str, Any]) -> str | None:
    """``data.synthetic_args``' sizes as the generator refuses them (:data:`SYNTHETIC_ARGS`), and
    the rows they make past :data:`~lightning_fed.limits.MAX_SYNTHETIC_ROWS` as the data source
    refuses them (:func:`~lightning_fed.limits.synthetic_rows_problem`; ``data.num_clients`` when
    ``synthetic_args`` does not give it, 1 when neither does: what is certain)."""
    dataset, args = init_args.get("dataset"), init_args.get("synthetic_args")
    if not isinstance(dataset, str) or not dataset.startswith("synthetic:") or not isinstance(args, Mapping):
        return None
    args = {key: any_value(value) for key, value in args.items()}  # `examples_per_client: "24"` is 24 to the parser
    if found := problems(SYNTHETIC_ARGS, args):
        return "; ".join(found)
    seed = args.get("seed")  # numpy's default_rng: `expected non-negative integer`, naming nothing, after the imports
    if isinstance(seed, int) and not isinstance(seed, bool) and (problem := SYNTHETIC_SEED.problem(seed)):
        return problem
    clients = args.get("num_clients", any_value(init_args.get("num_clients", 1)))
    return synthetic_rows_problem(clients, args.get("examples_per_client", 1))


# ------------------------------------------------------------------------------- federation:
FEDERATION = (
    in_range("federation.rounds", 1, MAX_ROUNDS, integer=True),
    at_least("federation.clients_per_round", 1, integer=True),
    one_of("federation.sampling", SAMPLINGS),
    in_range("federation.local_steps", 1, MAX_LOCAL_STEPS, integer=True, nullable=True),
    in_range("federation.local_epochs", 1, MAX_LOCAL_EPOCHS, integer=True, nullable=True),
    at_least("federation.per_client_scalars", 0, integer=True),
    at_least("federation.max_update_norm", 0, low_open=True, nullable=True),
    one_of("federation.on_large_update", SCREENING_MODES),
)
""":class:`~lightning_fed.run_config.FederationConfig`'s plain-data fields with a range
or choices (not a class: the section is the same for every run)."""
EVALUATION = (
    one_of("federation.eval_clients", EVAL_CLIENTS_CHOICES, nullable=True),
    at_least("federation.eval_panel_size", 1, integer=True),
    at_least("federation.eval_every", 1, integer=True),
)
""":class:`~lightning_fed.federation.evaluation_plan.EvaluationPlan`'s options (also ``federation.*``)."""

FEDERATION_ALL = FEDERATION + EVALUATION
"""Every rule of the ``federation:`` section (what the precheck applies)."""

# ------------------------------------------------------------------------------- federation.strategy:
WEIGHTINGS = ("num_examples", "uniform")
"""How the clients' models are averaged (``weighting`` of the FedAvg family, SCAFFOLD, FedBiscuit...)."""
HETLORA_WEIGHTINGS = (*WEIGHTINGS, "sparsity")
"""HetLoRA's ``weighting``: also per-module sparsity weights."""
MOMENTUM_REFERENCES = ("hsu", "openfedllm")
"""FedAvgM's ``reference``."""
FEDOPT_REFERENCES = ("reddi", "openfedllm")
"""FedAdam / FedYogi / FedAdagrad's ``reference``."""
CORRECTIONS = ("gradient", "parameter")
"""SCAFFOLD's ``correction``."""
STALENESS = ("sqrt", "constant")
"""FedBuff's ``staleness`` discount."""
EQ6_SCOPES = ("cluster", "all")
"""FedBiscuit's ``eq6_scope``."""

_S = "federation.strategy."
FEDAVG = (one_of(_S + "weighting", WEIGHTINGS), at_least(_S + "server_lr", 0, low_open=True))
FEDPROX_OWN = (at_least(_S + "mu", 0, low_open=True),)
FEDNOVA_OWN = (in_range(_S + "local_momentum", 0, 1, high_open=True),)
FEDAVGM_OWN = (in_range(_S + "momentum", 0, 1, high_open=True), one_of(_S + "reference", MOMENTUM_REFERENCES))
FEDOPT = (
    one_of(_S + "reference", FEDOPT_REFERENCES),
    one_of(_S + "weighting", WEIGHTINGS, nullable=True),
    at_least(_S + "server_lr", 0, low_open=True, nullable=True),
    in_range(_S + "beta_1", 0, 1, high_open=True),
    in_range(_S + "beta_2", 0, 1, high_open=True),
    at_least(_S + "tau", 0, low_open=True),
)
"""FedAdam, FedYogi, FedAdagrad (``null``: the ``reference``'s default ``server_lr`` / ``weighting``)."""
SCAFFOLD = (
    at_least(_S + "server_lr", 0, low_open=True),
    one_of(_S + "correction", CORRECTIONS),
    one_of(_S + "weighting", WEIGHTINGS),
)
TRIMMED_MEAN = (in_range(_S + "trim", 0, 0.5, high_open=True),)
FEDAMP = (
    at_least(_S + "temperature", 0, low_open=True),
    in_range(_S + "self_weight_floor", 0, 1),
    at_least(_S + "prox_mu", 0),
)
FEDBUFF = (
    at_least(_S + "buffer_size", 1, integer=True),
    at_least(_S + "server_lr", 0, low_open=True),
    one_of(_S + "staleness", STALENESS),
    at_least(_S + "max_staleness", 0, integer=True, nullable=True),
)
FEDBISCUIT = (
    one_of(_S + "weighting", WEIGHTINGS),
    one_of(_S + "eq6_scope", EQ6_SCOPES),
    at_least(_S + "warmup_rounds", 0, integer=True),
    at_least(_S + "regroup_every", 1, integer=True),
    at_least(_S + "num_selectors", 1, integer=True, odd=True),
)
"""FedBiscuit's (``num_selectors``: U, odd so that majority voting never ties)."""
HETEROGENEOUS_RANK = (one_of(_S + "weighting", WEIGHTINGS),)
"""FLoRA, FlexLoRA (and their base)."""
HETLORA = (
    one_of(_S + "weighting", HETLORA_WEIGHTINGS),
    in_range(_S + "prune_gamma", 0, 1, low_open=True, high_open=True, nullable=True),
    at_least(_S + "rank_penalty", 0),
)
"""HetLoRA's (and :func:`hetlora_problem`: a ``rank_penalty`` > 0 needs ``prune_gamma``)."""


def hetlora_problem(values: Mapping[str, Any]) -> str | None:
    """HetLoRA's ``rank_penalty`` > 0 (the self-pruning loss) without ``prune_gamma`` (its defaults:
    0.0 and ``null``), refused; ``values`` already passed :data:`HETLORA`'s rules."""
    penalty, gamma = values.get("rank_penalty", 0.0), values.get("prune_gamma")
    if isinstance(penalty, (int, float)) and not isinstance(penalty, bool) and penalty > 0 and gamma is None:
        return f"{_S}rank_penalty needs {_S}prune_gamma, got {penalty!r} without it"
    return None


STRATEGY_RULES: dict[str, tuple[Rule, ...]] = {
    "FedAvg": FEDAVG,
    "FedProx": FEDAVG + FEDPROX_OWN,
    "FedNova": FEDAVG + FEDNOVA_OWN,
    "FedAvgM": FEDAVG + FEDAVGM_OWN,
    "FedAdam": FEDOPT,
    "FedYogi": FEDOPT,
    "FedAdagrad": FEDOPT,
    "Scaffold": SCAFFOLD,
    "TrimmedMean": TRIMMED_MEAN,
    "CoordinateMedian": (),
    "FedAMP": FEDAMP,
    "FedBuff": FEDBUFF,
    "FedBiscuit": FEDBISCUIT,
    "FLoRA": HETEROGENEOUS_RANK,
    "FlexLoRA": HETEROGENEOUS_RANK,
    "HetLoRA": HETLORA,
}
"""``federation.strategy:``'s rules by class name; the messages name ``federation.strategy.<option>``
(as ``model.lr``: the key without ``init_args``, which jsonargparse accepts and names the same way)."""
CROSS_CHECKS: dict[str, Callable[[Mapping[str, Any]], str | None]] = {"HetLoRA": hetlora_problem}
"""A class's checks that involve two of its options, by class name (applied after its rules)."""


SECTIONS: dict[str, dict[str, tuple[Rule, ...]]] = {
    "model": MODEL_RULES,
    "data": DATA_RULES,
    "federation.strategy": STRATEGY_RULES,
    "federation.hooks": HOOK_RULES,
}
"""The class-valued options whose rules depend on the class (``federation.hooks``: each item of the list)."""
PACKAGES = {
    "model": "lightning_fed.modules",
    "data": "lightning_fed.datamodules",
    "federation.strategy": "lightning_fed.strategies",
    "federation.hooks": "lightning_fed.round_hooks",
}
"""Where each section's classes live: ``class_path`` ``lightning_fed.modules[.<file>].<Name>``."""


def class_rules(section: str, class_path: str) -> tuple[Rule, ...] | None:
    """The rules of ``section``'s class named ``class_path`` (short or full), or ``None`` if it is
    not one of the package's (a user's class: the live parser decides)."""
    module, _, name = class_path.rpartition(".")
    packages = HOOK_PACKAGES if section == "federation.hooks" else (PACKAGES[section],)
    if module and not any(module == p or module.startswith(p + ".") for p in packages):
        return None
    return SECTIONS[section].get(name)
