"""The instruction data of FedHDS's experiments (Sec. 5.1, App. D.4): Dolly-15K and Natural Instructions.

* **Dolly-15K** (``databricks/databricks-dolly-15k``: ``instruction``, ``context``,
  ``response``, ``category``): the last of the 8 categories in sorted order
  (``summarization``, the authors' code's category code 7) is held out for evaluation; the
  other 7 are split over 200 clients by a Dirichlet draw over categories (alpha 0.5 or
  5.0). Use :data:`DOLLY_FIELD_MAP` and the :class:`HeldOutDirichlet` partitioner with the
  ordinary :class:`~lightning_fed.datamodules.InstructionDataModule`, and
  ``HeldOutRouge(dataset=DOLLY, where={"category": "summarization"})`` for ROUGE-L.
* **Natural Instructions v2.8** (a clone of ``allenai/natural-instructions``: ``tasks/*.json``
  with ``Definition`` and ``Instances``, ``splits/default/{train,test}_tasks.txt``):
  :func:`prepare_natural_instructions` samples 20% of each training task with at least 20
  instances (one task per client) and 2% (at least 20) of each test task, and writes
  ``train.jsonl`` and ``test.jsonl`` with ``instruction``, ``input``, ``output``, ``task``.
  Train with ``dataset: <out>/train.jsonl`` and ``partition: ByKey(task)``; evaluate on
  ``<out>/test.jsonl``. From a shell:
  ``python -m lightning_fed.datamodules.instruction_sets <ni-root> <out-dir>``.
  The hub copy ``Muennighoff/natural-instructions`` (:data:`NI_HUB`: ``task_name``, ``id``,
  ``definition``, ``inputs``, ``targets``; splits ``train`` = training tasks and ``test`` =
  the held-out test tasks) loads directly with :data:`NI_HUB_FIELD_MAP` and
  ``partition: ByKey(task_name)`` (one task per client); it holds every instance, so
  subsample it (or use the clone and :func:`prepare_natural_instructions`) for the paper's 20%.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import numpy as np

from lightning_fed.datamodules.partition import Dirichlet, Partitioner, _column, _unique, check_partition
from lightning_fed.strict_parser import StrictParser

DOLLY = "databricks/databricks-dolly-15k"
DOLLY_FIELD_MAP = {"instruction": "instruction", "input": "context", "output": "response"}
DOLLY_HELD_OUT = "summarization"
NI_HUB = "Muennighoff/natural-instructions"
NI_HUB_FIELD_MAP = {"instruction": "definition", "input": "inputs", "output": "targets"}


@dataclass(frozen=True)
class HeldOutDirichlet(Partitioner):
    """A Dirichlet split over ``key`` of every row whose ``key`` is not held out.

    Held-out rows go to no client (they are the unseen tasks of the evaluation).

    Attributes:
        alpha: Dirichlet concentration (FedHDS: 0.5 and 5.0).
        key: Column of the task labels (Dolly: ``category``).
        held_out: Values of ``key`` left out; empty means the last value in sorted order.
        min_size: Fewest rows any client may get.
        max_attempts: Dirichlet draws tried before giving up.
    """

    alpha: float
    key: str = "category"
    held_out: Sequence[str] = field(default_factory=tuple)
    min_size: int = 1
    max_attempts: int = 100

    def held_out_values(self, ds: datasets.Dataset) -> list[str]:
        """The held-out values of ``key`` (the last sorted value by default)."""
        values, _ = _unique(_column(ds, self.key, self), self.key, self)
        if not self.held_out:
            return [values[-1].item() if hasattr(values[-1], "item") else values[-1]]
        missing = [v for v in self.held_out if v not in set(values.tolist())]
        if missing:
            raise ValueError(
                f"partition {self!r}: held_out values {missing} are not values of {self.key!r} ({values.tolist()})"
            )
        return list(self.held_out)

    def __call__(self, ds: datasets.Dataset, num_clients: int, seed: int) -> list[list[int]]:
        held = set(self.held_out_values(ds))
        keep = np.flatnonzero(~np.isin(_column(ds, self.key, self), list(held)))
        if len(keep) == 0:
            raise ValueError(f"partition {self!r}: no rows left after holding out {sorted(held)}")
        inner = Dirichlet(self.alpha, self.key, self.min_size, self.max_attempts)(ds.select(keep), num_clients, seed)
        return check_partition([sorted(keep[p].tolist()) for p in inner], num_clients, repr(self))


def _task_names(root: Path, split: str) -> list[str]:
    path = root / "splits" / "default" / f"{split}_tasks.txt"
    if not path.is_file():
        raise FileNotFoundError(f"natural instructions: no {path} (expected a clone of allenai/natural-instructions)")
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def _task_rows(root: Path, name: str, max_input_chars: int | None) -> tuple[str, list[dict]]:
    path = root / "tasks" / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"natural instructions: task {name!r} is listed but {path} does not exist")
    task = json.loads(path.read_text())
    definition = task.get("Definition")
    if not definition or not isinstance(definition, list) or not str(definition[0]).strip():
        raise ValueError(f"natural instructions: task {name!r} has no `Definition`")
    rows = [
        i
        for i in task.get("Instances", [])
        if i.get("output") and str(i["output"][0]).strip() and str(i.get("input", "")).strip()
    ]
    if max_input_chars is not None:
        rows = [i for i in rows if len(i["input"]) < max_input_chars]
    return str(definition[0]), rows


def prepare_natural_instructions(
    root: str | Path,
    out_dir: str | Path,
    train_fraction: float = 0.2,
    test_fraction: float = 0.02,
    min_instances: int = 20,
    min_test_instances: int = 20,
    max_input_chars: int | None = None,
    seed: int = 42,
) -> dict[str, int]:
    """Sample Natural Instructions as FedHDS does and write ``train.jsonl`` and ``test.jsonl``.

    Args:
        root: The data set's folder (``tasks/``, ``splits/default/``).
        out_dir: Where the two files go (created).
        train_fraction: Fraction of each training task's instances kept (paper: 20%).
        test_fraction: Fraction of each test task's instances kept (paper: 2%).
        min_instances: Training tasks with fewer usable instances are skipped (paper: 20).
        min_test_instances: Each test task keeps at least this many instances (or all).
        max_input_chars: Drop instances whose input is this long or longer (optional).
        seed: Seed of the sampling.

    Returns:
        Counts: ``train_tasks``, ``train_rows``, ``test_tasks``, ``test_rows``.
    """
    root, out = Path(root).expanduser(), Path(out_dir).expanduser()
    for name, value in (("train_fraction", train_fraction), ("test_fraction", test_fraction)):
        if not 0.0 < value <= 1.0:
            raise ValueError(f"`{name}` must be in (0, 1], got {value}")
    rng = np.random.default_rng(seed)
    counts = {"train_tasks": 0, "train_rows": 0, "test_tasks": 0, "test_rows": 0}
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        lines = []
        for name in _task_names(root, split):
            definition, rows = _task_rows(root, name, max_input_chars)
            if split == "train":
                if len(rows) < min_instances:
                    continue
                k = max(1, int(len(rows) * train_fraction))
            else:
                if not rows:
                    continue
                k = min(len(rows), max(min_test_instances, math.ceil(len(rows) * test_fraction)))
            for i in sorted(rng.choice(len(rows), k, replace=False).tolist()):
                lines.append(
                    json.dumps(
                        {
                            "instruction": definition,
                            "input": rows[i]["input"],
                            "output": rows[i]["output"][0],
                            "task": name,
                        }
                    )
                )
            counts[f"{split}_tasks"] += 1
            counts[f"{split}_rows"] += k
        if not lines:
            raise ValueError(f"natural instructions: no {split} task has enough instances in {root}")
        (out / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    return counts


def main(argv: list[str] | None = None) -> None:
    """``python -m lightning_fed.datamodules.instruction_sets ROOT OUT``: prepare Natural Instructions."""
    parser = StrictParser(description=prepare_natural_instructions.__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("out_dir")
    parser.add_argument("--train-fraction", type=float, default=0.2)
    parser.add_argument("--test-fraction", type=float, default=0.02)
    parser.add_argument("--min-instances", type=int, default=20)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    counts = prepare_natural_instructions(
        args.root, args.out_dir, args.train_fraction, args.test_fraction, args.min_instances, seed=args.seed
    )
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
