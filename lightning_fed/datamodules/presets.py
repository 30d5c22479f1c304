"""The preference datasets of FedPDPO (App. D.1) by name: field maps, splits, preparation.

``load_preset(name)`` loads a dataset from the hub (or, with ``path``, from a local file
shaped like it), prepares it into ``prompt``/``chosen``/``rejected`` plus the columns its
partition needs, and validates it. ``cross_domain`` builds the one-dataset-per-client
setting. :class:`PresetPreferenceDataModule` makes both usable from a config:

.. code-block:: yaml

    data:
      class_path: lightning_fed.datamodules.presets.PresetPreferenceDataModule
      init_args:
        presets: [yuasosnin/imdb-dpo]
        num_clients: 3
        partition: {class_path: lightning_fed.datamodules.margin.RewardMarginShards, init_args: {score: margin}}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import datasets

from lightning_fed.datamodules.preference import PreferenceDataModule
from lightning_fed.datamodules.sources import apply_field_map, load_hub_or_local, validate_records

CANONICAL = ["prompt", "chosen", "rejected"]

# FedPDPO App. D.1.2, 3-client language split of Code-Vulnerability-Security.
LANGUAGE_GROUPS: dict[str, int] = {
    **dict.fromkeys(["javascript", "php", "python", "ruby", "typescript"], 0),  # web & scripting
    **dict.fromkeys(["java", "c#", "kotlin", "swift"], 1),  # enterprise & mobile
    **dict.fromkeys(["c++", "c", "c/c++", "go", "fortran", "rust"], 2),  # systems & HPC
}


def message_text(value: Any, role: str) -> str:
    """A field as plain text: a string as is; a chat message (``{"role", "content"}``) or a
    list of them (the UltraFeedback-binarized shape) as the content of its last ``role``
    message (or of its last message if none has that role)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return str(value.get("content", ""))
    if isinstance(value, Sequence) and value and all(isinstance(m, Mapping) for m in value):
        turns = [m for m in value if m.get("role") == role] or list(value)
        return str(turns[-1].get("content", ""))
    raise ValueError(f"data: expected a string or chat messages, got {type(value).__name__}: {str(value)[:80]!r}")


def plain_text_pairs(ds: datasets.Dataset) -> datasets.Dataset:
    """``prompt``/``chosen``/``rejected`` as strings, whether stored as strings or as chat
    messages (prompt: the last user turn; responses: the last assistant turn)."""

    def is_text(column: str) -> bool:
        feature = ds.features.get(column)
        return isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")

    if all(is_text(c) for c in CANONICAL if c in ds.features):
        return ds
    return ds.map(
        lambda r: {
            "prompt": message_text(r["prompt"], "user"),
            "chosen": message_text(r["chosen"], "assistant"),
            "rejected": message_text(r["rejected"], "assistant"),
        }
    )


def imdb_margin(ds: datasets.Dataset) -> datasets.Dataset:
    """Add ``margin = chosen_reward - rejected_reward`` (the reward-margin partition's key)."""
    return ds.map(lambda r: {"margin": float(r["chosen_reward"]) - float(r["rejected_reward"])})


def code_language_groups(ds: datasets.Dataset) -> datasets.Dataset:
    """Lower-case ``lang`` and add ``lang_group`` (0, 1, 2: the paper's 3-client split)."""

    def group(row: dict[str, Any]) -> dict[str, Any]:
        lang = str(row["lang"]).strip().lower()
        if lang not in LANGUAGE_GROUPS:
            raise ValueError(f"data lang: {row['lang']!r} is in no language group; known: {sorted(LANGUAGE_GROUPS)}")
        return {"lang": lang, "lang_group": LANGUAGE_GROUPS[lang]}

    return ds.map(group)


def webgpt_pairs(ds: datasets.Dataset) -> datasets.Dataset:
    """WebGPT comparisons -> pairs: the answer with the higher score is chosen; ties dropped."""
    ds = ds.filter(
        lambda r: float(r["score_0"]) != float(r["score_1"]) and r["answer_0"].strip() and r["answer_1"].strip()
    )

    def pair(row: dict[str, Any]) -> dict[str, str]:
        question = row["question"]["full_text"] if isinstance(row["question"], Mapping) else str(row["question"])
        first = float(row["score_0"]) > float(row["score_1"])
        return {
            "prompt": question,
            "chosen": row["answer_0" if first else "answer_1"],
            "rejected": row["answer_1" if first else "answer_0"],
        }

    return ds.map(pair, remove_columns=[c for c in ds.column_names if c in CANONICAL])


@dataclass(frozen=True)
class DatasetPreset:
    """How one hub dataset becomes preference records.

    Attributes:
        field_map: Canonical field -> source column (``None``: already canonical).
        split: Training split on the hub.
        test_split: Held-out split on the hub, if it has one.
        prepare: Turns raw rows into canonical rows plus partition keys, before the map.
        partition: How the paper partitions it (documentation).
    """

    field_map: dict[str, str] | None = None
    split: str = "train"
    test_split: str | None = None
    prepare: Callable[[datasets.Dataset], datasets.Dataset] | None = None
    partition: str = ""


# Hub schemas (the hub is not reachable from CI; each was checked against public sources):
# - yuasosnin/imdb-dpo: prompt, chosen, rejected (str), chosen_reward, rejected_reward
#   (float); train and test splits (paper App. D.1.1: 9,000 / 1,000).
# - CyberNative/Code_Vulnerability_Security_DPO: lang, vulnerability, system, question,
#   chosen, rejected (all str), one train split from secure_programming_dpo.json. Verified
#   from the hub viewer's cast error on a mirror listing those columns
#   (huggingface.co/datasets/ansulev/cybernative-code-vulnerability-security-dpo) and from
#   code reading row["lang"] (compared lower-case to "python"), row["question"],
#   row["chosen"], row["rejected"], row["vulnerability"] via the datasets-server rows API.
# - openai/webgpt_comparisons: question {dataset, id, full_text}, quotes_0/quotes_1
#   {title: [str], extract: [str]}, answer_0/answer_1 (str), tokens_0/tokens_1,
#   score_0/score_1 (float in [-1, 1], summing to 0; equal scores are ties); one train
#   split of 19,578 comparisons. Verified from the dataset card and its loading script
#   (huggingface.co/datasets/openai/webgpt_comparisons, README.md and
#   webgpt_comparisons.py) and a derived card's features (erbacher/ragnroll-webgpt).
# - jondurbin/py-dpo-v0.1: prompt, chosen, rejected (str), one train split (~9.4k rows,
#   py-dpo.parquet). Verified from jondurbin's own loader (bagel: item["prompt"],
#   item["chosen"], item["rejected"]) and READMEs that load the parquet as
#   prompt/chosen/rejected.
# - kaitchup/UltraFeedback-prompt-chosen-rejected: prompt, chosen, rejected; train 17.1k and
#   test 895 rows, parquet (hub viewer page). Its card declares no features that we could
#   read, and it is passed straight to TRL's DPOTrainer in published code, so the fields
#   are strings in all likelihood; because UltraFeedback derivatives (HuggingFaceH4/
#   ultrafeedback_binarized) store chosen/rejected as message lists, the preset accepts
#   both shapes (plain_text_pairs).
PRESETS: dict[str, DatasetPreset] = {
    "yuasosnin/imdb-dpo": DatasetPreset(
        test_split="test", prepare=imdb_margin, partition="RewardMarginShards(score='margin'), 3 or 10 clients"
    ),
    "CyberNative/Code_Vulnerability_Security_DPO": DatasetPreset(
        field_map={"prompt": "question"},
        prepare=code_language_groups,
        partition="ByKey('lang_group') for 3 clients, ByKey('lang') for one client per language",
    ),
    "openai/webgpt_comparisons": DatasetPreset(prepare=webgpt_pairs, partition="cross-domain client (WebGPT)"),
    "jondurbin/py-dpo-v0.1": DatasetPreset(prepare=plain_text_pairs, partition="cross-domain client (PyDPO)"),
    "kaitchup/UltraFeedback-prompt-chosen-rejected": DatasetPreset(
        test_split="test", prepare=plain_text_pairs, partition="cross-domain client (UltraFeedback)"
    ),
}


def load_preset(
    name: str, path: str | None = None, split: str | None = None, max_rows: int | None = None, seed: int = 0
) -> datasets.Dataset:
    """Load, prepare and validate one of :data:`PRESETS`.

    Args:
        name: The hub name, a key of :data:`PRESETS`.
        path: A local ``.json/.jsonl/.csv/.parquet`` file or folder with the hub dataset's
            columns, used instead of the hub.
        split: Hub split (default: the preset's training split).
        max_rows: Keep a seeded random subset of this many rows (the paper uses subsets).
        seed: Seed of that subset.
    """
    if name not in PRESETS:
        raise ValueError(f"data.presets: unknown dataset {name!r}; known: {sorted(PRESETS)}")
    preset = PRESETS[name]
    ds = load_hub_or_local(name, None, split or preset.split, path, max_rows, seed)
    if preset.prepare is not None:
        ds = preset.prepare(ds)
    ds = apply_field_map(ds, "preference", name, preset.field_map)
    validate_records(ds, "preference", name)
    return ds


def cross_domain(sources: Sequence[datasets.Dataset], names: Sequence[str]) -> datasets.Dataset:
    """One dataset per client: client ``k`` holds ``sources[k]`` (``client`` and ``domain`` columns)."""
    if len(sources) != len(names) or not sources:
        raise ValueError(f"cross_domain: need one name per source, got {len(sources)} sources and {len(names)} names")
    parts = [
        ds.select_columns(CANONICAL).map(lambda _, k=k, n=n: {"client": k, "domain": n})
        for k, (ds, n) in enumerate(zip(sources, names))
    ]
    return datasets.concatenate_datasets(parts)


class PresetPreferenceDataModule(PreferenceDataModule):
    """A :class:`PreferenceDataModule` over FedPDPO's datasets, by preset name.

    One preset is the intra-domain setting (choose ``partition``, e.g. reward margin or
    language); several presets are the cross-domain setting, one dataset per client
    (partitioned by the ``client`` column; ``num_clients`` must equal their number).

    Args:
        presets: Names from :data:`PRESETS`.
        preset_files: Local files to read instead of the hub, by preset name.
        max_rows: Rows kept per preset (a seeded subset); ``None`` keeps all.
        **kwargs: See :class:`~lightning_fed.datamodules.FederatedDataModule` (``dataset``
            and ``field_map`` are set from the presets).
    """

    def __init__(
        self, presets: list[str], preset_files: dict[str, str] | None = None, max_rows: int | None = None, **kwargs: Any
    ) -> None:
        unknown = [p for p in presets if p not in PRESETS]
        if not presets or unknown:
            raise ValueError(f"data.presets must be names from {sorted(PRESETS)}, got {presets!r}")
        if len(presets) > 1 and kwargs.get("num_clients", 8) != len(presets):
            raise ValueError(
                f"data.num_clients must be {len(presets)} (one per preset) in the cross-domain setting,"
                f" got {kwargs.get('num_clients', 8)}"
            )
        kwargs.pop("dataset", None)
        super().__init__(dataset="preset:" + "+".join(presets), **kwargs)
        self.presets, self.preset_files, self.max_rows = list(presets), dict(preset_files or {}), max_rows

    def load_records(self) -> datasets.Dataset:
        """The prepared records of the presets (cross-domain with a ``client`` column if several)."""
        loaded = [
            load_preset(
                p, self.preset_files.get(p), self.split if len(self.presets) == 1 else None, self.max_rows, self.seed
            )
            for p in self.presets
        ]
        return self.map_fields(loaded[0] if len(loaded) == 1 else cross_domain(loaded, self.presets))
