"""``lightning-fed plan --config X``: a client's memory and a round's traffic, before running.

Reads the run's YAML config as plain data (nothing is instantiated, no weight is loaded) and
prints :func:`~lightning_fed.planning.estimate.estimate`'s items::

    lightning-fed plan --config configs/fedpdpo.yaml
    python -m lightning_fed.planning.cli --config configs/demo.yaml --quantization nf4 --activation-checkpointing
    python -m lightning_fed.planning.cli --config my7b.yaml --batch-size 2 --max-length 1024 --dtype bfloat16

Exit codes: 0 printed, 2 for a config problem (one line on stderr).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from lightning_fed.planning.estimate import PlanInputs, estimate, model_shape, module_inputs, objective_of

PRECISION_DTYPES = {"bf16-true": "bfloat16", "16-true": "float16", "bf16": "bfloat16", "bf16-mixed": "bfloat16"}


def _args(section: Any) -> dict[str, Any]:
    if not isinstance(section, dict):
        return {}
    return dict(section.get("init_args") or {k: v for k, v in section.items() if k != "class_path"})


def inputs_from_config(config: dict[str, Any]) -> tuple[dict[str, Any], PlanInputs]:
    """``(backbone section, PlanInputs)`` read from a parsed ``lightning-fed`` YAML config."""
    model = config.get("model") or {}
    margs = _args(model)
    backbone = margs.get("backbone")
    if not isinstance(backbone, dict):
        raise ValueError("model.init_args.backbone: missing; the planner needs the backbone section")
    data = _args(config.get("data"))
    fed = config.get("federation") or {}
    trainer = config.get("trainer") or {}
    strategy = fed.get("strategy") or {}
    strategy_name = strategy.get("class_path", "") if isinstance(strategy, dict) else str(strategy)
    dtype = backbone.get("dtype") or PRECISION_DTYPES.get(str(trainer.get("precision")), "float32")
    return backbone, module_inputs(
        margs,
        backbone,
        margs.get("lora") or {},
        batch_size=data.get("batch_size", 4),
        max_length=data.get("max_length", 512),
        objective=objective_of(str(model.get("class_path", ""))),
        dtype=dtype,
        clients_per_round=int(fed.get("clients_per_round", 2)),
        scaffold="scaffold" in strategy_name.lower(),
    )


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def value_problems(config: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """Every size the plan is computed from that no run could have, each naming its option.

    A command-line option is named as given (``--batch-size``), a config value by its key
    (``data.batch_size``, as ``fit`` names it); the values fit refuses are refused here too, before any
    shape is read (a batch of 0 used to reach the activation count as a RuntimeError).
    """
    data, fed = _args(config.get("data")), config.get("federation") or {}
    problems = []
    for flag, dest, least in (("--batch-size", "batch_size", 1), ("--max-length", "max_length", 2)):
        given = getattr(args, dest)  # the same bounds as the data module's (data.batch_size >= 1, ...)
        name, value = (flag, given) if given is not None else (f"data.{dest}", data.get(dest))
        if (given is not None or dest in data) and not (_positive_int(value) and value >= least):
            problems.append(f"{name} must be an integer >= {least}, got {value!r}")
    if not isinstance(fed, dict):
        fed = {}
    cpr = fed.get("clients_per_round", 2)
    if not _positive_int(cpr):
        problems.append(f"federation.clients_per_round must be an integer >= 1, got {cpr!r}")
    k = fed.get("batch_clients")
    if k is not None and k not in ("off", "auto") and not _positive_int(k):
        problems.append(f"federation.batch_clients must be 'off', 'auto' or an integer >= 1, got {k!r}")
    if args.runtime_mb is not None and not (math.isfinite(args.runtime_mb) and args.runtime_mb >= 0):
        problems.append(f"--runtime-mb must be a finite number >= 0, got {args.runtime_mb}")
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


def group_lines(shape: Any, p: PlanInputs, batch_clients: Any) -> list[str]:
    """The printout's part for ``federation.batch_clients`` (none when it is unset or ``off``)."""
    from lightning_fed.planning.group import batched_group_size, estimate_group

    if batch_clients in (None, "off"):
        return []
    if batch_clients == "auto":
        k, how = batched_group_size(shape, p, p.clients_per_round), "the largest that fits this machine's memory"
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


def report(backbone: dict[str, Any], p: PlanInputs, batch_clients: Any = None, length_from: str = "max_length") -> str:
    """The planner's printout for ``backbone`` and ``p`` (and ``federation.batch_clients``).

    Raises:
        ValueError: ``p.max_length`` is longer than the model's position embeddings hold,
            naming ``length_from`` (the option or config key it came from).
    """
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
    lines += group_lines(shape, p, batch_clients)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Print the plan of ``--config``; options override what the config says.

    Returns:
        0 on success, 2 for a problem with the arguments or the config.
    """
    parser = argparse.ArgumentParser(prog="lightning-fed plan", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="a lightning-fed YAML config")
    parser.add_argument("--batch-size", type=int, help="sequences (pairs) per local step")
    parser.add_argument("--max-length", type=int, help="tokens per sequence")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--quantization", choices=["none", "nf4", "int8"])
    parser.add_argument("--activation-checkpointing", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--personal-dtype", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--runtime-mb", type=float, help="allowance for the process itself (default 512)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) and 2
    try:
        import yaml

        path = Path(args.config)
        if not path.is_file():
            raise ValueError(f"--config: no file {args.config!r}")
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as err:
            raise ValueError(f"--config {args.config!r} is not UTF-8 text (byte {err.start}: {err.reason})") from None
        except yaml.YAMLError as err:
            raise ValueError(f"--config {args.config!r} is not valid YAML ({' '.join(str(err).split())})") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ValueError(f"--config {args.config!r} holds a {type(loaded).__name__}, expected a mapping")
        if problems := value_problems(loaded or {}, args):
            raise ValueError("; ".join(problems))
        backbone, p = inputs_from_config(loaded or {})
        for opt, field_name in (
            ("batch_size", "batch_size"),
            ("max_length", "max_length"),
            ("dtype", "dtype"),
            ("quantization", "quantization"),
            ("activation_checkpointing", "activation_checkpointing"),
            ("personal_dtype", "personal_dtype"),
        ):
            if getattr(args, opt) is not None:
                setattr(p, field_name, getattr(args, opt))
        if args.runtime_mb is not None:
            p.runtime_bytes = int(args.runtime_mb * 2**20)
        length_from = "--max-length" if args.max_length is not None else "data.max_length"
        print(report(backbone, p, ((loaded or {}).get("federation") or {}).get("batch_clients"), length_from))
    except (ValueError, OSError) as err:
        print(f"lightning-fed plan: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
