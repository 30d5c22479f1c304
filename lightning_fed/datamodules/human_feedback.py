"""The federated human-preference benchmark of FedBis / FedBiscuit (Wu et al., 2024,
arXiv:2407.03038, Sec. 6 and Table 5), by name, following :mod:`presets`:

* **TL;DR comparisons** (``openai/summarize_from_feedback``, config ``comparisons``;
  Stiennon et al., 2020): prompt ``info.post``, the two ``summaries[i].text``, the labeller's
  ``choice``; one client per labeller (``worker``), 53 in the paper's training split.
  Rows without a Reddit post (the CNN/DM articles) are left out, as in the paper.
* **SHP** (``stanfordnlp/SHP``; Ethayarajh et al., 2022): prompt ``history``, responses
  ``human_ref_A``/``human_ref_B``, ``labels`` 1 when A is preferred; 200 clients by
  Dirichlet(0.3) over the 18 ``domain`` values, drawn per question (``post_id``) so that no
  question is split between clients (:class:`GroupedDirichlet`).

``load_feedback(name)`` loads from the hub (or, with ``path``, from a local file with the
hub's columns), prepares canonical ``prompt``/``chosen``/``rejected`` rows plus the partition
key, and validates them. The data modules serve the same clients to the selector (FedBis,
FedBiscuit) and to the baselines (FedDPO, and FedAvg = SFT on the preferred responses):

.. code-block:: yaml

    data:
      class_path: lightning_fed.datamodules.human_feedback.FeedbackSelectorDataModule
      init_args: {preset: openai/summarize_from_feedback, num_clients: 53, template: tldr}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import datasets

from lightning_fed.datamodules.grouped_partition import GroupedDirichlet
from lightning_fed.datamodules.instruction import InstructionDataModule
from lightning_fed.datamodules.partition import ByKey, Partitioner
from lightning_fed.datamodules.preference import PreferenceDataModule
from lightning_fed.datamodules.selector import SelectorDataModule
from lightning_fed.datamodules.sources import load_hub_or_local, validate_records

CANONICAL = ["prompt", "chosen", "rejected"]


def _choice(value: Any, field: str, row_id: Any) -> int:
    if value not in (0, 1) or isinstance(value, bool):
        raise ValueError(f"data {field}: must be 0 or 1, got {value!r} (row {row_id!r})")
    return int(value)


def tldr_pairs(ds: datasets.Dataset) -> datasets.Dataset:
    """TL;DR comparisons -> pairs: ``summaries[choice]`` is chosen; ``worker`` names the client."""
    ds = ds.filter(lambda r: bool(((r["info"] or {}).get("post") or "").strip()))

    def pair(row: dict[str, Any]) -> dict[str, Any]:
        info = row["info"]
        texts = [s["text"] for s in row["summaries"]]
        if len(texts) != 2:
            raise ValueError(f"data summaries: must hold 2 summaries, got {len(texts)} (post {info.get('id')!r})")
        c = _choice(row["choice"], "choice", info.get("id"))
        return {
            "prompt": info["post"],
            "chosen": texts[c],
            "rejected": texts[1 - c],
            "worker": str(row["worker"]),
            "title": info.get("title") or "",
            "subreddit": info.get("subreddit") or "",
        }

    return ds.map(pair, remove_columns=[c for c in ds.column_names if c in CANONICAL + ["info", "summaries"]])


def shp_pairs(ds: datasets.Dataset) -> datasets.Dataset:
    """SHP -> pairs: ``labels == 1`` means ``human_ref_A`` is preferred; keeps ``domain`` and ``post_id``."""

    def pair(row: dict[str, Any]) -> dict[str, Any]:
        a_wins = _choice(row["labels"], "labels", row.get("post_id")) == 1
        a, b = row["human_ref_A"], row["human_ref_B"]
        return {"prompt": row["history"], "chosen": a if a_wins else b, "rejected": b if a_wins else a}

    return ds.map(pair, remove_columns=[c for c in ds.column_names if c in CANONICAL])


@dataclass(frozen=True)
class FeedbackPreset:
    """How one hub dataset becomes federated preference records (Table 5).

    Attributes:
        prepare: Raw rows -> canonical rows plus the partition key.
        partition: The paper's partition.
        num_clients: The paper's number of clients.
        config: The hub dataset's configuration name.
        split: Training split on the hub.
        test_split: Held-out split on the hub.
        selector_template: The selector prompt of Figure 4 for the task.
    """

    prepare: Callable[[datasets.Dataset], datasets.Dataset]
    partition: Callable[[], Partitioner]
    num_clients: int
    config: str | None = None
    split: str = "train"
    test_split: str | None = None
    selector_template: str = "shp"


FEEDBACK_PRESETS: dict[str, FeedbackPreset] = {
    "openai/summarize_from_feedback": FeedbackPreset(
        prepare=tldr_pairs,
        partition=lambda: ByKey("worker"),
        num_clients=53,
        config="comparisons",
        test_split="validation",
        selector_template="tldr",
    ),
    "stanfordnlp/SHP": FeedbackPreset(
        prepare=shp_pairs,
        partition=lambda: GroupedDirichlet(alpha=0.3, key="domain", group="post_id"),
        num_clients=200,
        test_split="test",
        selector_template="shp",
    ),
}


def load_feedback(
    name: str, path: str | None = None, split: str | None = None, max_rows: int | None = None, seed: int = 0
) -> datasets.Dataset:
    """Load, prepare and validate one of :data:`FEEDBACK_PRESETS`.

    Args:
        name: The hub name, a key of :data:`FEEDBACK_PRESETS`.
        path: A local ``.json/.jsonl/.csv/.parquet`` file or folder with the hub's columns.
        split: Hub split (default: the preset's training split).
        max_rows: Keep a seeded random subset of this many rows.
        seed: Seed of that subset.
    """
    if name not in FEEDBACK_PRESETS:
        raise ValueError(f"data.preset: unknown dataset {name!r}; known: {sorted(FEEDBACK_PRESETS)}")
    preset = FEEDBACK_PRESETS[name]
    ds = load_hub_or_local(name, preset.config, split or preset.split, path, max_rows, seed)
    ds = preset.prepare(ds)
    validate_records(ds, "preference", name)
    return ds


class _FeedbackRecords:
    """Feeds the prepared records of a :data:`FEEDBACK_PRESETS` dataset to a FederatedDataModule."""

    def _init_feedback(self, preset: str, preset_path: str | None, max_rows: int | None) -> None:
        if preset not in FEEDBACK_PRESETS:
            raise ValueError(f"data.preset must be one of {sorted(FEEDBACK_PRESETS)}, got {preset!r}")
        self.preset, self.preset_path, self.max_rows = preset, preset_path, max_rows
        if self.partition is None:
            self.partition = FEEDBACK_PRESETS[preset].partition()

    def load_records(self) -> datasets.Dataset:
        """The preset's prepared pairs, renamed by ``field_map`` (the SFT baseline's)."""
        records = load_feedback(self.preset, self.preset_path, self.split, self.max_rows, self.seed)
        return self.map_fields(records)


class FeedbackSelectorDataModule(_FeedbackRecords, SelectorDataModule):
    """Binary-selector data (FedBis, FedBiscuit) on TL;DR or SHP, partitioned as in the paper.

    Args:
        preset: A key of :data:`FEEDBACK_PRESETS`.
        preset_path: A local file or folder with the hub dataset's columns, read instead of the hub.
        max_rows: Rows kept (a seeded subset); ``None`` keeps all.
        **kwargs: See :class:`~lightning_fed.datamodules.FederatedDataModule`; ``partition``
            defaults to the paper's (by worker; Dirichlet(0.3) over domains per question).
    """

    def __init__(self, preset: str, preset_path: str | None = None, max_rows: int | None = None, **kwargs: Any) -> None:
        kwargs.setdefault(
            "template", FEEDBACK_PRESETS.get(preset, FEEDBACK_PRESETS["stanfordnlp/SHP"]).selector_template
        )
        super().__init__(dataset=f"preset:{preset}", **kwargs)
        self._init_feedback(preset, preset_path, max_rows)


class FeedbackPreferenceDataModule(_FeedbackRecords, PreferenceDataModule):
    """The same clients as :class:`FeedbackSelectorDataModule`, as DPO pairs (the FedDPO baseline)."""

    def __init__(self, preset: str, preset_path: str | None = None, max_rows: int | None = None, **kwargs: Any) -> None:
        super().__init__(dataset=f"preset:{preset}", **kwargs)
        self._init_feedback(preset, preset_path, max_rows)


class FeedbackSFTDataModule(_FeedbackRecords, InstructionDataModule):
    """The same clients, SFT on the preferred responses (the paper's FedAvg baseline)."""

    def __init__(self, preset: str, preset_path: str | None = None, max_rows: int | None = None, **kwargs: Any) -> None:
        kwargs["field_map"] = {"instruction": "prompt", "output": "chosen"}
        super().__init__(dataset=f"preset:{preset}", **kwargs)
        self._init_feedback(preset, preset_path, max_rows)
