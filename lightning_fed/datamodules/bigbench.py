"""BIG-bench's JSON tasks as instruction data with many task types, for held-out-task tests.

FedHDS (Qin et al., 2025, Sec. 5.1, App. D.4) trains on Natural Instructions, one task per
client, and scores ROUGE-L on tasks no client trained on. Natural Instructions is not on a
package registry; BIG-bench (Srivastava et al., 2022) is: the ``bigbench`` source
distribution on PyPI (``pip download --no-deps bigbench==1.0.0``, 358 MB) ships every JSON
task as ``bigbench/benchmark_tasks/<task>/task.json`` (167 top-level tasks, real text, each
with a ``description`` and ``examples``), and Natural Instructions itself includes many of
them. This module reads those files, from the ``.tar.gz`` or an unpacked folder, into
instruction records and splits the tasks into training and held-out tasks:

* ``instruction``: the task's ``task_prefix`` if it has one, else its ``description``;
* ``input``: the example's ``input``; for a multiple-choice example (``target_scores``) the
  options follow as ``Options: a | b | c`` (unless the task sets ``append_choices_to_input``
  to false);
* ``output``: the example's ``target`` (the first if several), or the option with the
  highest score;
* ``task``: the task's folder name (partition with ``ByKey(task)``: one task per client).

From a shell (writes ``train.jsonl`` and ``test.jsonl``)::

    python -m lightning_fed.datamodules.bigbench bigbench-1.0.0.tar.gz out/ --held-out 8
"""

from __future__ import annotations

import json
import re
import tarfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightning_fed.strict_parser import StrictParser

TASK_FILE = "task.json"
# Top-level task files only (a task's subtask folders hold variants of the same task).
_MEMBER = re.compile(r"(?:^|/)benchmark_tasks/([^/]+)/task\.json$")
DEFAULT_MAX_BYTES = 20_000_000  # skips the three image/dialogue tasks of 30-60 MB


def _task_files(source: str | Path, max_bytes: int) -> Iterator[tuple[str, bytes]]:
    """``(task name, task.json bytes)`` of every top-level task under ``source``."""
    path = Path(source)
    if path.is_file():
        if not tarfile.is_tarfile(path):
            raise ValueError(f"BIG-bench source {str(source)!r} is neither a folder nor a tar archive")
        with tarfile.open(path) as tar:
            for member in tar:
                match = _MEMBER.search(member.name)
                if match and member.isfile() and member.size <= max_bytes:
                    handle = tar.extractfile(member)
                    if handle is not None:
                        yield match.group(1), handle.read()
        return
    if not path.is_dir():
        raise ValueError(f"BIG-bench source {str(source)!r} does not exist")
    roots = [p for p in (path / "bigbench" / "benchmark_tasks", path / "benchmark_tasks", path) if p.is_dir()]
    root = next((r for r in roots if any(r.glob(f"*/{TASK_FILE}"))), path)
    for file in sorted(root.glob(f"*/{TASK_FILE}")):
        if file.stat().st_size <= max_bytes:
            yield file.parent.name, file.read_bytes()


def task_records(task: dict[str, Any], name: str, max_options: int = 10) -> list[dict[str, str]]:
    """One BIG-bench task's examples as instruction records (see the module docstring).

    Examples without a usable answer (no ``target`` and no ``target_scores``, an empty
    answer, or more than ``max_options`` options) are skipped.
    """
    instruction = (task.get("task_prefix") or "").strip() or (task.get("description") or "").strip()
    append = task.get("append_choices_to_input", True)
    out = []
    for example in task.get("examples", []):
        text = str(example.get("input", "")).strip()
        target = example.get("target")
        scores = example.get("target_scores")
        if isinstance(target, list):
            target = target[0] if target else None
        if isinstance(target, str) and target.strip():
            answer = target.strip()
        elif isinstance(scores, dict) and 1 < len(scores) <= max_options:
            options = list(scores)
            answer = max(options, key=lambda o: float(scores[o]))  # the first of equal best scores
            if append:
                text = f"{text}\nOptions: {' | '.join(options)}"
        else:
            continue
        if text and answer:
            out.append({"instruction": instruction, "input": text, "output": answer, "task": name})
    return out


def load_bigbench(
    source: str | Path,
    tasks: Sequence[str] | None = None,
    max_per_task: int | None = None,
    min_per_task: int = 1,
    max_input_words: int | None = None,
    max_output_words: int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    seed: int = 0,
) -> list[dict[str, str]]:
    """Instruction records of BIG-bench's JSON tasks under ``source``, task by task (sorted).

    Args:
        source: The ``bigbench`` source distribution (``.tar.gz``) or a folder holding
            ``<task>/task.json`` (directly, or under ``benchmark_tasks`` or
            ``bigbench/benchmark_tasks``).
        tasks: Keep only these tasks (all by default); a named task that is missing is an error.
        max_per_task: Keep a seeded random subset of at most this many examples per task.
        min_per_task: Drop tasks with fewer usable examples (after the word limits).
        max_input_words: Drop examples whose input has more words (keeps sequences short).
        max_output_words: Drop examples whose answer has more words.
        max_bytes: Skip task files larger than this.
        seed: Seed of the per-task subsets.
    """
    wanted = set(tasks) if tasks is not None else None
    by_task: dict[str, list[dict[str, str]]] = {}
    for name, raw in _task_files(source, max_bytes):
        if wanted is not None and name not in wanted:
            continue
        try:
            task = json.loads(raw)
        except json.JSONDecodeError as err:
            raise ValueError(f"BIG-bench task {name!r}: {TASK_FILE} is not valid JSON ({err})") from err
        rows = [
            r
            for r in task_records(task, name)
            if (max_input_words is None or len(r["input"].split()) <= max_input_words)
            and (max_output_words is None or len(r["output"].split()) <= max_output_words)
        ]
        if len(rows) < max(1, min_per_task):
            continue
        if max_per_task is not None and len(rows) > max_per_task:
            keep = np.sort(np.random.default_rng([seed, _stable(name)]).permutation(len(rows))[:max_per_task])
            rows = [rows[i] for i in keep]
        by_task[name] = rows
    if wanted is not None and wanted - set(by_task):
        raise ValueError(f"BIG-bench tasks not found (or too few usable examples): {sorted(wanted - set(by_task))}")
    if not by_task:
        raise ValueError(f"no BIG-bench task with at least {min_per_task} usable examples under {str(source)!r}")
    return [r for name in sorted(by_task) for r in by_task[name]]


def _stable(name: str) -> int:
    """A seed part from a task name that does not change between processes (unlike ``hash``)."""
    return int.from_bytes(name.encode()[:8].ljust(8, b"\0"), "little") % (2**32)


def held_out_split(
    records: Sequence[dict[str, str]], num_held_out: int, seed: int = 0, key: str = "task"
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Training and held-out records: ``num_held_out`` tasks, drawn at random, go to no client.

    As in FedHDS's Natural Instructions setting, the held-out tasks are scored (ROUGE-L) and
    never trained on; every record of a task is on one side.
    """
    names = sorted({r[key] for r in records})
    if not 0 < num_held_out < len(names):
        raise ValueError(f"`num_held_out` must be in [1, {len(names) - 1}] for {len(names)} tasks, got {num_held_out}")
    held = set(np.array(names)[np.random.default_rng(seed).permutation(len(names))[:num_held_out]].tolist())
    return [r for r in records if r[key] not in held], [r for r in records if r[key] in held]


def write_jsonl(records: Sequence[dict[str, str]], path: str | Path) -> None:
    """One JSON object per line (a ``data.dataset`` the data modules load)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = StrictParser(description="BIG-bench JSON tasks -> train.jsonl / test.jsonl (held-out tasks)")
    parser.add_argument("source", help="bigbench-1.0.0.tar.gz or a folder of <task>/task.json")
    parser.add_argument("out", help="output folder")
    parser.add_argument("--held-out", type=int, default=8, help="tasks held out for evaluation")
    parser.add_argument("--max-per-task", type=int, default=None)
    parser.add_argument("--min-per-task", type=int, default=20)
    parser.add_argument("--max-input-words", type=int, default=None)
    parser.add_argument("--max-output-words", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    records = load_bigbench(
        args.source,
        max_per_task=args.max_per_task,
        min_per_task=args.min_per_task,
        max_input_words=args.max_input_words,
        max_output_words=args.max_output_words,
        seed=args.seed,
    )
    train, test = held_out_split(records, args.held_out, args.seed)
    write_jsonl(train, Path(args.out) / "train.jsonl")
    write_jsonl(test, Path(args.out) / "test.jsonl")
    print(
        f"{len({r['task'] for r in train})} training tasks ({len(train)} rows), "
        f"{len({r['task'] for r in test})} held-out tasks ({len(test)} rows) -> {args.out}"
    )


if __name__ == "__main__":
    main()
