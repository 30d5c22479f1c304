"""``lightning-fed plan --config X``: a client's memory and a round's traffic, before running.

Reads the run's config as ``lightning-fed fit`` does (:func:`plan_config`: one parser, the same
defaults and checks; the run and the data module are built, no weight is loaded; a DP-SGD
``target_epsilon`` is calibrated on the data as ``fit`` does) and prints
:func:`~lightning_fed.planning.estimate.estimate`'s items::

    lightning-fed plan --config configs/fedpdpo.yaml
    python -m lightning_fed.plan_cli --config configs/demo.yaml --quantization nf4 --activation-checkpointing
    python -m lightning_fed.plan_cli --config my7b.yaml --batch-size 2 --max-length 1024 --dtype bfloat16

Exit codes: 0 printed, 2 for a problem with the arguments or the config: one line, ``error: ...``,
as ``fit`` reports it (:class:`~lightning_fed.errors.UserError`, :func:`lightning_fed.cli.console_main`).
Every problem that can be seen without torch (this command's own options, the config file, its
keys and values as ``fit``'s precheck sees them, a ``--max-length`` past the positions the config
gives) is reported before torch, transformers or Lightning is imported (:func:`precheck`).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from typing import TYPE_CHECKING, Any

from lightning_fed.errors import OneLineParser, UserError, ValueRefusal

if TYPE_CHECKING:
    from lightning_fed.planning.estimate import PlanInputs
    from lightning_fed.run import FederatedRun

PROG = "lightning-fed plan"
POSITION_KEYS = ("n_positions", "max_position_embeddings")
"""The keys of a ``backbone.config`` that bound its sequence length (``n_ctx`` is not one: GPT-2's
config keeps ``n_positions`` beside it)."""
PRECISION_DTYPES = {"bf16-true": "bfloat16", "16-true": "float16", "bf16": "bfloat16", "bf16-mixed": "bfloat16"}


def plan_config(config: str | list[str]) -> tuple[dict[str, Any], FederatedRun]:
    """``config`` (a YAML path or a shipped config's name, or several: merged in order, as ``fit``
    merges its ``--config`` files) as ``lightning-fed fit`` reads it: parsed
    by :func:`~lightning_fed.run_parser.parse_config` (every default applied once, every check
    ``fit`` makes before it builds anything), its :class:`FederatedRun` and its data module built
    (their own checks), and a DP-SGD budget calibrated on the data set up (:func:`calibrate_dp_sgd`);
    no weight is loaded. Returns the parsed config as plain data and the run.

    Raises:
        ValueError: A problem ``fit`` reports, in its words.
    """
    from lightning_fed.run_parser import build_data, build_run, parse_config
    from lightning_fed.shipped_configs import resolve_config

    first, *more = [config] if isinstance(config, str) else config
    more_args = shlex.join(a for c in more for a in ("--config", str(resolve_config(c))))
    parsed = parse_config(first, more_args, fit_keys=True)  # fit --print_config's file too
    run = build_run(parsed.get("federation"))
    data = build_data(parsed)  # data.batch_size, data.max_length...: the data module's own bounds
    config = parsed.as_dict()
    calibrate_dp_sgd(config, run, data)
    return config, run


def calibrate_dp_sgd(config: dict[str, Any], run: FederatedRun, data: Any) -> None:
    """``fit``'s DP-SGD calibration of a ``model.dp_sgd.target_epsilon``: the data set up with the backbone's
    tokenizer (no weight loaded), as a private ``fit`` sets it up, then every client's ``z_k`` calibrated by
    :meth:`~lightning_fed.privacy.example_budget.ExampleBudget.calibrate` (issue 41: ``plan`` printed a plan
    for a budget ``fit`` refuses once it has read the data).

    Raises:
        ValueRefusal: ``fit``'s line for a budget no noise multiplier reaches (or above the largest calibrated).
    """
    dp_sgd = (config["model"].get("init_args") or {}).get("dp_sgd")
    if not isinstance(dp_sgd, dict) or dp_sgd.get("target_epsilon") is None:
        return  # a given noise multiplier: nothing calibrated
    from lightning_fed.modules.backbone import BackboneConfig, backbone_tokenizer
    from lightning_fed.privacy.dp_sgd import DPSGDSettings
    from lightning_fed.run_factory import run_privacy

    data.tokenizer = backbone_tokenizer(BackboneConfig(**config["model"]["init_args"]["backbone"]))
    data.private = True
    data.setup("fit")
    budget = run_privacy(run).example_budget_of(DPSGDSettings(**dp_sgd), data.num_clients, data.batch_size, run.rounds)
    budget.calibrate(list(data.client_sizes))


def inputs_from_config(config: dict[str, Any], run: FederatedRun) -> tuple[dict[str, Any], PlanInputs]:
    """``(backbone section, PlanInputs)`` of a parsed config (:func:`plan_config`) and its run."""
    from lightning_fed.planning.estimate import module_inputs, objective_of
    from lightning_fed.run_checks import inner_strategy
    from lightning_fed.strategies.scaffold import Scaffold

    model = config["model"]
    margs = model["init_args"]
    backbone = margs.get("backbone")
    if not isinstance(backbone, dict):
        raise ValueError("model.init_args.backbone: missing; the planner needs the backbone section")
    data = config["data"]["init_args"]
    precision = str((config.get("trainer") or {}).get("precision"))
    dtype = (
        backbone["dtype"]
        if backbone.get("dtype") not in (None, "float32")
        else PRECISION_DTYPES.get(precision, "float32")
    )
    return backbone, module_inputs(
        margs,
        backbone,
        margs.get("lora") or {},
        batch_size=data["batch_size"],
        max_length=data["max_length"],
        objective=objective_of(str(model["class_path"])),
        dtype=dtype,
        clients_per_round=run.clients_per_round,
        scaffold=isinstance(inner_strategy(run.strategy), Scaffold),
    )


MAX_SIZE = 2**31 - 1
"""The largest ``--batch-size`` planned: a dimension of the tensors the activations are counted on
(``--batch-size 10**24``: torch's overflow ``TypeError`` after the imports). ``--max-length`` is bounded
by the model's positions."""
MAX_RUNTIME_MB = 2**20
"""The largest ``--runtime-mb`` (1 TiB): the allowance for the process itself, beside the model."""


def _integer(text: str) -> int | str:
    """``--batch-size`` / ``--max-length`` as given: an integer, or the text :func:`value_problems` names
    (``nan``: argparse's own ``invalid int value`` line named no bound)."""
    try:
        return int(text)
    except ValueError:
        return text


def _number(text: str) -> float | str:
    """``--runtime-mb`` as given: a number, or the text :func:`value_problems` names."""
    try:
        return float(text)
    except ValueError:
        return text


def value_problems(args: argparse.Namespace) -> list[str]:
    """Every size given on the command line that no run could have, each naming its option
    (``--batch-size``) and the value as given; the config's own values are checked as ``fit`` checks
    them (:func:`plan_config`)."""
    problems = []
    # the same least values as the data module's (data.batch_size >= 1, ...); --max-length's largest is the
    # model's positions (length_problem, report), which names them
    for flag, dest, least, most in (
        ("--batch-size", "batch_size", 1, MAX_SIZE),
        ("--max-length", "max_length", 2, None),
    ):
        given = getattr(args, dest)
        if given is None or (isinstance(given, int) and least <= given and (most is None or given <= most)):
            continue
        bounds = f"an integer in [{least}, {most}]" if most is not None else f"an integer >= {least}"
        problems.append(f"{flag} must be {bounds}, got {given!r}")
    given = args.runtime_mb
    if given is not None and not (isinstance(given, float) and 0 <= given <= MAX_RUNTIME_MB):  # nan too
        problems.append(f"--runtime-mb must be a number of MiB in [0, {MAX_RUNTIME_MB}], got {given!r}")
    return problems


def max_positions(shape: Any) -> int | None:
    """The longest sequence the model's position embeddings hold (``None`` when its config has no such limit)."""
    config = shape.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(text, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _mb(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB" if n < 2**30 else f"{n / 2**30:,.2f} GiB"


def group_lines(shape: Any, p: PlanInputs, batch_clients: Any, fallback: str | None = None) -> list[str]:
    """The printout's part for ``federation.batch_clients`` (none when it is ``off``); ``fallback``: why
    the run trains its clients one after another (:func:`~lightning_fed.planning.group_fallback.planned_fallback`)."""
    from lightning_fed.planning.group import batched_group_size, cpu_group_cap, estimate_group

    if batch_clients == "off":
        return []
    if fallback is not None:  # the run's own line at start
        from lightning_fed.batching.fallback import fallback_line

        return ["", fallback_line(batch_clients, fallback)]
    if batch_clients == "auto":
        k, cap = batched_group_size(shape, p, p.clients_per_round), cpu_group_cap(shape, p)
        how = "the largest that fits this machine's memory"
        if cap < k:  # what fit takes on a CPU (planning.group.run_group_size)
            k, how = cap, f"{how}, at most {cap} on a CPU (planning.group.cpu_group_cap)"
    else:
        k, how = min(int(batch_clients), p.clients_per_round), "at most clients_per_round"
    plan = estimate_group(shape, p, k)
    per_client = sum(plan.items[n] for n in ("lora", "lora_grads", "personal", "personal_grads", "optimizer"))
    return [
        "",
        f"clients trained together (federation.batch_clients: {batch_clients}): K = {k} ({how})",
        f"  activations     {_mb(plan.items['activations']):>14}",
        f"  K clients' adapters, gradients, optimizer {_mb(per_client)}",
        f"  total           {_mb(plan.total):>14}",
    ]


def report(
    backbone: dict[str, Any],
    p: PlanInputs,
    batch_clients: Any = None,
    length_from: str = "max_length",
    fallback: str | None = None,
) -> str:
    """The planner's printout for ``backbone`` and ``p`` (and ``federation.batch_clients``, or
    ``fallback``: why the run's clients train one after another).

    Raises:
        ValueError: ``p.max_length`` is longer than the model's position embeddings hold,
            naming ``length_from`` (the option or config key it came from).
    """
    from lightning_fed.planning.estimate import PlanInputs, estimate, model_shape

    shape = model_shape(backbone)
    most = max_positions(shape)
    if most is not None and p.max_length > most:
        raise ValueError(
            f"{length_from} {p.max_length} is longer than the model's {most} positions"
            f" ({shape.model_type} config); the plan would count tokens the model cannot take"
        )
    plan = estimate(shape, p)
    other = PlanInputs(**{**p.__dict__, "activation_checkpointing": not p.activation_checkpointing})
    alt = estimate(shape, other).items["activations"]
    q = f", {p.quantization}" if p.quantization != "none" else ""
    lines = [
        f"model: {shape.model_type}, {shape.total_params / 1e6:,.1f}M parameters ({shape.layers} layers,"
        f" hidden {shape.hidden}, vocab {shape.vocab}), {p.dtype}{q}",
        f"local step: {p.objective}, batch {p.batch_size} x {p.max_length} tokens, LoRA r={p.lora_r}, {p.optimizer},"
        f" activation checkpointing {'on' if p.activation_checkpointing else 'off'}",
        "",
        "memory of one client (peak of a local step)",
    ]
    for name, value in plan.items.items():
        lines.append(f"  {name:<15} {_mb(value):>14}")
    lines.append(f"  {'total':<15} {_mb(plan.total):>14}")
    state = "on" if not p.activation_checkpointing else "off"
    alt_total = plan.total - plan.items["activations"] + alt
    lines.append(f"  (activations with checkpointing {state}: {_mb(alt)}; total {_mb(alt_total)})")
    lines += [
        "",
        "per client, kept between rounds",
        f"  personal state  {_mb(plan.personal_bytes):>14} ({p.personal_dtype})",
        "",
        f"traffic per round ({p.clients_per_round} clients)",
        f"  up per client   {_mb(plan.up_bytes_per_client):>14}",
        f"  down per client {_mb(plan.down_bytes_per_client):>14}",
        f"  round total     {_mb(plan.round_bytes):>14}",
    ]
    lines += group_lines(shape, p, batch_clients, fallback)
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """``lightning-fed plan``'s options; an argument error is one line (:class:`~.errors.OneLineParser`)."""
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config",
        required=True,
        action="append",
        help="a lightning-fed YAML config, or a shipped config's name; given again, merged as fit merges them",
    )
    parser.add_argument("--batch-size", type=_integer, help="sequences (pairs) per local step")
    parser.add_argument("--max-length", type=_integer, help="tokens per sequence")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--quantization", choices=["none", "nf4", "int8"])
    parser.add_argument("--activation-checkpointing", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--personal-dtype", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--runtime-mb", type=_number, help="allowance for the process itself (default 512)")
    return parser


def _given_positions(backbone: Any) -> tuple[int, str] | None:
    """``(positions, model_type)`` where a ``backbone.config`` mapping states its positions itself."""
    config = backbone.get("config") if isinstance(backbone, dict) else None
    if not isinstance(config, dict):
        return None
    for key in POSITION_KEYS:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, str(config.get("model_type"))
    return None


def length_problem(length: Any, length_from: str, backbone: Any) -> str | None:
    """The line refusing ``length`` tokens (from ``length_from``) past the positions ``backbone.config``
    gives, in :func:`report`'s words; ``None`` when it fits or the limit is the model's default."""
    given = _given_positions(backbone)
    if given is None or not isinstance(length, int) or isinstance(length, bool):
        return None
    most, model_type = given
    if length <= most:
        return None
    return (
        f"{length_from} {length} is longer than the model's {most} positions ({model_type} config);"
        " the plan would count tokens the model cannot take"
    )


def federation_problem(federation: Any) -> str | None:
    """The line :class:`~lightning_fed.run_config.FederationConfig` refuses the ``federation:``
    section's plain fields with (``batch_clients: x``, ``min_clients`` past ``clients_per_round``...:
    what ``fit`` says when it builds the run), or ``None``. An integer the class cannot compare as a
    float (``OverflowError``) is left to the parser (:func:`plan_config`); a bug of ours is raised. A quoted
    number (``rounds: "2"``) is the number, as the parser hands it on (:func:`~lightning_fed.class_sections.parsed`)."""
    from dataclasses import fields

    from lightning_fed.class_sections import parsed
    from lightning_fed.federation_rules import FEDERATION_MORE
    from lightning_fed.option_rules import FEDERATION_ALL
    from lightning_fed.run_config import FederationConfig

    if not isinstance(federation, dict):
        return None
    names = {f.name for f in fields(FederationConfig)}
    values = parsed(FEDERATION_ALL + FEDERATION_MORE, {k: v for k, v in federation.items() if k in names})
    try:
        FederationConfig(**values)
    except ValueError as err:
        return str(err)
    except OverflowError:  # an integer past a float (400 digits): the parser's line, later
        return None
    return None


def precheck(args: argparse.Namespace) -> None:
    """What ``plan`` can refuse before torch is imported: its own options (:func:`value_problems`),
    the config as ``fit``'s precheck reads it (:func:`~lightning_fed.config_precheck.precheck_arguments`:
    the file, its keys, its values), the ``federation:`` section as the run's config class checks it
    (:func:`federation_problem`) and a sequence length past the positions the config gives; then, with
    Opacus (and so torch) imported, a privacy budget ``fit`` refuses, in ``fit``'s line
    (:func:`~lightning_fed.federation.early_check.precheck_noise`).

    ``fit``'s precheck also refuses an unwritable ``trainer.default_root_dir``; ``plan`` writes
    nothing, so it is handed a writable one (the temporary folder) instead of the config's.

    Raises:
        UserError: One line naming the option or key and the value (or ``SystemExit(2)``, the
            line already written, as ``fit``'s precheck does).
    """
    from lightning_fed.config_precheck import precheck_arguments
    from lightning_fed.config_values import merged_config
    from lightning_fed.limits import BUILDS_WEIGHTS
    from lightning_fed.shipped_configs import resolve_config_args

    if problems := value_problems(args):
        raise UserError("; ".join(problems))
    # a shipped config's name resolved (lightning-fed plan does it before main; here for main in-process)
    configs = [a for config in args.config for a in ("--config", config)]
    fit_args = resolve_config_args([*configs, f"--trainer.default_root_dir={tempfile.gettempdir()}"])
    built = BUILDS_WEIGHTS.set(False)  # the model is built on the meta device: a 7B config plans
    try:
        precheck_arguments(["fit", *fit_args], shown_as="plan")
    finally:
        BUILDS_WEIGHTS.reset(built)
    merged = merged_config(fit_args)
    sections = merged.sections if merged is not None else {}
    if problem := federation_problem(sections.get("federation")):
        raise UserError(problem)
    model, data = sections.get("model"), sections.get("data")
    backbone = model["init_args"].get("backbone") if isinstance(model, dict) else None
    if args.max_length is not None:
        length, length_from = args.max_length, "--max-length"
    else:
        length = data["init_args"].get("max_length") if isinstance(data, dict) else None
        length_from = "data.max_length"
    if problem := length_problem(length, length_from, backbone):
        raise UserError(problem)
    from lightning_fed.federation.early_check import precheck_noise

    precheck_noise(["fit", *fit_args])  # a privacy budget fit refuses, in fit's line (Opacus: torch imported)


def main(argv: list[str]) -> int:
    """Print the plan of ``--config``; options override what the config says.

    Returns:
        0 on success.

    Raises:
        UserError: A problem with the arguments or the config (exit status 2, one line), the
            ones :func:`precheck` can see before torch is imported.
    """
    args = build_parser().parse_args(argv)
    precheck(args)
    from lightning_fed.planning.group_fallback import planned_fallback

    try:
        config, run = plan_config(args.config)
        backbone, p = inputs_from_config(config, run)
        for opt in (
            "batch_size",
            "max_length",
            "dtype",
            "quantization",
            "activation_checkpointing",
            "personal_dtype",
        ):
            if getattr(args, opt) is not None:
                setattr(p, opt, getattr(args, opt))
        if args.runtime_mb is not None:
            p.runtime_bytes = int(args.runtime_mb * 2**20)
        length_from = "--max-length" if args.max_length is not None else "data.max_length"
        fallback = planned_fallback(config, list(run.hooks)) if run.batch_clients != "off" else None
        print(report(backbone, p, run.batch_clients, length_from, fallback))
    except ValueRefusal as err:  # fit's line, naming the --config file that set its option as fit does
        from lightning_fed.config_precheck import named_source

        raise named_source(err, ["fit", *(a for config in args.config for a in ("--config", config))]) from None
    except UserError:
        raise
    except UnicodeDecodeError as err:  # a ValueError: named as fit names it (the file, the byte)
        given = args.config[0] if len(args.config) == 1 else args.config
        raise UserError(f"config {given!r} is not UTF-8 text (byte {err.start}: {err.reason})") from None
    except (ValueError, OSError) as err:
        raise UserError(str(err)) from err
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UserError as err:  # as lightning-fed reports it (lightning_fed/cli.py)
        sys.stderr.write(f"error: {err}\n")
        sys.exit(2)
