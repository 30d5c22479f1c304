"""Task benchmarks through lm-evaluation-harness (``lm-eval``; Gao et al., EleutherAI).

The evaluated model is the one already built in memory (backbone + the run's PEFT adapter),
wrapped in lm-eval's :class:`~lm_eval.models.huggingface.HFLM` and scored by
:func:`lm_eval.simple_evaluate`: requests, batching, few-shot contexts, filters, metrics and
their standard errors are lm-eval's. Any lm-eval task runs by name (``gsm8k``, ``mmlu``,
``hellaswag``, ``truthfulqa_mc2``: their datasets come from the hub), and tasks defined in
local YAML files run offline (``include_path``; the package ships ``lf_arithmetic_mc`` and
``lf_arithmetic_gen`` in ``lightning_fed/evaluation/tasks``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from unittest import mock

from lightning_fed.path_kinds import no_file_said

LOCAL_TASKS = Path(__file__).resolve().parent / "tasks"

LM_EVAL_NOTICES = {
    "lm_eval.models.huggingface": (
        "`pretrained` model kwarg is not of type `str`",  # the model is built here, on purpose
        "Passed an already-initialized model through `pretrained`",
    ),
    "lm_eval.api.task": ("Custom kwargs can be passed to `--metadata`",),  # a flag of lm-eval's own CLI
}
"""lm-eval's warnings about how this package calls it, by logger: nothing a user can act on."""


class DropLmEvalNotices(logging.Filter):
    """Drops the warnings of :data:`LM_EVAL_NOTICES` (errors always pass)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        message = str(record.msg)
        return not any(notice in message for notices in LM_EVAL_NOTICES.values() for notice in notices)


def quiet_lm_eval() -> None:
    """Hold back :data:`LM_EVAL_NOTICES` unless ``--verbose`` (:mod:`lightning_fed.console`)."""
    from lightning_fed.console import verbose_requested

    if verbose_requested([]):
        return
    for name in LM_EVAL_NOTICES:
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropLmEvalNotices) for f in logger.filters):
            logger.addFilter(DropLmEvalNotices())


@contextlib.contextmanager
def git_hash_quietly() -> Iterator[None]:
    """lm-eval records ``git describe`` of the working folder; outside a checkout git's "fatal: not
    a git repository" went to the terminal. The same look-up, with git's stderr discarded."""
    import lm_eval.evaluator
    from lm_eval.loggers.utils import get_commit_from_path

    def git_commit_hash() -> str | None:
        try:
            out = subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL)
            return out.strip().decode()
        except (subprocess.CalledProcessError, FileNotFoundError):
            return get_commit_from_path(os.getcwd())

    with mock.patch.object(lm_eval.evaluator, "get_git_commit_hash", git_commit_hash):
        yield


@dataclass
class LmEvalOptions:
    """lm-evaluation-harness tasks (``--benchmarks [lm_eval]``)."""

    tasks: list[str] = field(default_factory=list)
    """lm-eval task, group or tag names (``gsm8k``, ``mmlu``, ``lf_arithmetic_mc``), or paths of
    task YAML files (their folder is added to ``include_path``)."""

    include_path: list[str] = field(default_factory=list)
    """Extra folders of task YAML files (the shipped local tasks are always included)."""

    num_fewshot: int | None = None
    """Few-shot examples per prompt (default: each task's own)."""

    limit: float | None = None
    """Documents per task: a count (>= 1) or a fraction (< 1). Default: all. For testing only:
    lm-eval marks limited results as not comparable."""

    max_length: int | None = None
    """Longest context in tokens (default: the model's own)."""

    apply_chat_template: bool | None = None
    """Format prompts with the tokenizer's chat template (for instruct models). Default: as the
    evaluated run was trained, i.e. true when its ``data.template`` is ``chat``."""

    system_instruction: str | None = None
    """System prompt used with ``apply_chat_template``. Default: the run's ``data.system_prompt``
    when the chat template is applied."""

    bootstrap_iters: int = 1000
    """Bootstrap resamples for the standard error of non-mean metrics (0: no stderr)."""

    def __post_init__(self) -> None:
        problems = []
        if self.limit is not None and (self.limit <= 0 or (self.limit > 1 and self.limit != int(self.limit))):
            problems.append(f"--lm_eval.limit must be a count >= 1 or a fraction in (0, 1), got {self.limit}")
        if self.num_fewshot is not None and self.num_fewshot < 0:
            problems.append(f"--lm_eval.num_fewshot must be >= 0, got {self.num_fewshot}")
        if self.max_length is not None and self.max_length < 2:
            problems.append(f"--lm_eval.max_length must be >= 2, got {self.max_length}")
        for path in self.include_path:
            if not Path(path).expanduser().is_dir():
                problems.append(f"--lm_eval.include_path {path!r}: no such folder")
        problems.extend(filter(None, map(task_file_problem, self.tasks)))
        if problems:
            raise ValueError("; ".join(problems))


def follow_run_format(options: LmEvalOptions, template: str | None, system_prompt: str | None) -> LmEvalOptions:
    """``options`` with the unset chat settings taken from the run's prompt format.

    A run trained with ``data.template: chat`` is evaluated through the same chat template (and
    its ``data.system_prompt``), as lm-eval's ``--apply_chat_template`` does for instruct models;
    options given explicitly are kept.

    Args:
        options: The ``--lm_eval`` options.
        template: The run's ``data.template`` (``None`` for a bare model).
        system_prompt: The run's ``data.system_prompt``.
    """
    from lightning_fed.datamodules.templates import CHAT

    apply = options.apply_chat_template if options.apply_chat_template is not None else template == CHAT
    system = options.system_instruction
    if system is None and apply and template == CHAT:
        system = system_prompt
    return replace(options, apply_chat_template=apply, system_instruction=system)


def task_file_problem(task: str) -> str | None:
    """The line refusing ``task`` of ``--lm_eval.tasks`` when it names a task YAML file that is not there,
    or is there but no regular file (a FIFO, a folder: named from ``stat`` alone, never opened; red
    team 17 B17: a FIFO "does not exist", after the model loaded), else ``None``."""
    if not task.endswith((".yaml", ".yml")):
        return None
    said = no_file_said(Path(task).expanduser())
    if said is None:
        return None
    return f"--lm_eval.tasks: task file {task!r}{' does not exist' if said.startswith(':') else said}"


def task_manager(options: LmEvalOptions) -> tuple[Any, list[str]]:
    """lm-eval's task index over its own tasks, the shipped local ones and ``include_path``.

    Returns:
        The :class:`~lm_eval.tasks.TaskManager` and the task names to run.

    Raises:
        ValueError: One line naming ``--lm_eval.tasks`` if no task is given or a name is unknown.
    """
    from lm_eval.tasks import TaskManager

    if not options.tasks:
        raise ValueError("--lm_eval.tasks is empty; name lm-eval tasks, e.g. --lm_eval.tasks [lf_arithmetic_mc]")
    include = [str(LOCAL_TASKS)] + [str(Path(p).expanduser().resolve()) for p in options.include_path]
    names = []
    for task in options.tasks:
        if task.endswith((".yaml", ".yml")):
            path = Path(task).expanduser()
            if problem := task_file_problem(task):
                raise ValueError(problem)
            include.append(str(path.resolve().parent))
            names.append(_yaml_task_name(path))
        else:
            names.append(task)
    # Indexing lm-eval's own few thousand task files takes seconds to a minute: skip it when
    # every name is a local task.
    manager = TaskManager(include_path=include, include_defaults=False)
    if any(not manager.match_tasks([n]) for n in names):
        manager = TaskManager(include_path=include)
    unknown = [n for n in names if not manager.match_tasks([n])]
    if unknown:
        local = sorted(
            n
            for n in manager.all_tasks
            if manager.task_index[n].yaml_path and str(LOCAL_TASKS) in str(manager.task_index[n].yaml_path)
        )
        raise ValueError(
            f"--lm_eval.tasks: unknown task {unknown[0]!r} (not an lm-eval task, group or tag; shipped local tasks: "
            f"{local})"
        )
    return manager, names


def _yaml_task_name(path: Path) -> str:
    import yaml

    class _Loader(yaml.SafeLoader):  # only the name is needed; lm-eval's !function tags are left alone
        pass

    _Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    config = yaml.load(path.read_text(), Loader=_Loader) or {}
    name = config.get("task") or config.get("group")
    if not isinstance(name, str):
        raise ValueError(f"--lm_eval.tasks: task file {str(path)!r} has no 'task' name")
    return name


def make_lm(model: Any, tokenizer: Any, batch_size: int = 8, max_length: int | None = None) -> Any:
    """The in-memory model as lm-eval's ``HFLM`` (the PEFT adapter stays applied)."""
    from lm_eval.models.huggingface import HFLM

    quiet_lm_eval()
    return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, max_length=max_length)


def run_lm_eval(lm: Any, options: LmEvalOptions, manager: Any, tasks: list[str], seed: int = 0) -> dict[str, Any]:
    """Evaluate ``lm`` on ``tasks`` with :func:`lm_eval.simple_evaluate`.

    Returns:
        ``{"results": {task: {"<metric>,<filter>": value, ...}}, "groups", "n_samples",
        "versions", "higher_is_better", "settings"}``: lm-eval's own keys (``acc,none``,
        ``acc_stderr,none``, ``exact_match,strip``...).

    Raises:
        RuntimeError: One line naming the task if lm-eval cannot load its dataset (a hub task
            without network, for example).
    """
    import lm_eval

    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    quiet_lm_eval()
    limit = None if options.limit is None else (int(options.limit) if options.limit >= 1 else options.limit)
    try:
        with git_hash_quietly():
            out = lm_eval.simple_evaluate(
                model=lm,
                tasks=tasks,
                task_manager=manager,
                num_fewshot=options.num_fewshot,
                limit=limit,
                bootstrap_iters=options.bootstrap_iters,
                log_samples=False,
                apply_chat_template=bool(options.apply_chat_template),
                system_instruction=options.system_instruction,
                random_seed=seed,
                numpy_random_seed=seed,
                torch_random_seed=seed,
                fewshot_random_seed=seed,
            )
    except (ConnectionError, OSError, FileNotFoundError) as err:
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise RuntimeError(
            f"--lm_eval.tasks {tasks}: lm-eval could not load a task's data (offline? HF_DATASETS_OFFLINE=1?): {first}"
        ) from None
    return {
        "results": out["results"],
        "groups": out.get("groups", {}),
        "n_samples": out.get("n-samples", {}),
        "versions": out.get("versions", {}),
        "higher_is_better": out.get("higher_is_better", {}),
        "settings": {
            "num_fewshot": options.num_fewshot,
            "limit": limit,
            "apply_chat_template": bool(options.apply_chat_template),
            "system_instruction": options.system_instruction,
        },
    }


def scalars(result: dict[str, Any]) -> dict[str, float]:
    """The numeric metrics as ``lm_eval/<task>/<metric>`` (for TensorBoard)."""
    out = {}
    for task, metrics in {**result.get("results", {}), **result.get("groups", {})}.items():
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "samples":
                out[f"lm_eval/{task}/{key.replace(',', '/')}"] = float(value)
    return out


def generate_until(lm: Any, contexts: list[str], until: list[str], max_new_tokens: int) -> list[str]:
    """Greedy continuations of ``contexts`` through lm-eval's batched generation.

    ``HFLM.generate_until`` sorts the requests by length, left-pads each batch, stops at any
    string of ``until`` (and the eos token) and cuts the text there; results come back in the
    order of ``contexts``.
    """
    from lm_eval.api.instance import Instance

    kwargs = {"until": list(until), "max_gen_toks": max_new_tokens, "do_sample": False}
    requests = [
        Instance(request_type="generate_until", doc={}, arguments=(c, dict(kwargs)), idx=i)
        for i, c in enumerate(contexts)
    ]
    return lm.generate_until(requests, disable_tqdm=True)
