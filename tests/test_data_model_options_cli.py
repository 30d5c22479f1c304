"""Data and model options that only a built data set or model used to refuse, refused before torch is
imported in one line naming the option, its value and the file that set it (outside run rt7, rows
19, 22, 23).

On a8debca each was refused 11-15 s of CPU later, after the imports, in two lines (the ``--debug``
hint) naming no option or no file: a partition's column missing from the data set (``partition
Dirichlet(...): no column 'nokey'``), a LoRA target the model has no module of, GPT-2's ``n_head``
not dividing ``n_embd`` (``embed_dim must be divisible by num_heads``), an empty
``synthetic_args.groups``. The columns of a planted set are read from its generator's source and
those of a local file from its header (:mod:`lightning_fed.data_cross_rules`); the module names and
the head rule of a model type from :mod:`lightning_fed.transformers_configs`. The children cannot
import torch (``tests/helpers/cli.py``); each runs in an empty folder, which stays empty.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lightning_fed.shipped_configs import resolve_config
from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch
from tests.helpers.refusals import assert_config_refused_before_torch

TINY = yaml.safe_load(Path(resolve_config("tiny")).read_text(encoding="utf-8"))
PREFERENCE_COLUMNS = "prompt, chosen, rejected, client, group"
ROWS = [{"prompt": f"p{i}", "chosen": f"c{i}", "rejected": f"r{i}", "author": f"a{i % 2}"} for i in range(8)]


def _partition(name: str, **init_args: object) -> dict:
    return {"class_path": f"lightning_fed.datamodules.{name}", "init_args": init_args}


def _set(config: dict, path: str, value: object) -> None:
    *parents, last = path.split(".")
    for key in parents:
        config = config[key]
    if value is None:
        del config[last]
    else:
        config[last] = value


def _write_data(folder: Path, suffix: str) -> str:
    path = folder / f"pairs{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8")
    elif suffix == ".json":
        path.write_text(json.dumps(ROWS), encoding="utf-8")
    elif suffix == ".csv":
        path.write_text("prompt,chosen,rejected,author\n" + "".join(f"{','.join(r.values())}\n" for r in ROWS))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(ROWS), path)
    return str(path)


CASES = {
    "dirichlet_key": (  # `partition Dirichlet(alpha=0.3, key='nokey', ...): no column 'nokey'` + hint, 14.8 s
        [("data.init_args.partition", _partition("Dirichlet", alpha=0.3, key="nokey"))],
        "data.partition.key 'nokey': data.dataset 'synthetic:preferences' has no such column"
        f" (columns: {PREFERENCE_COLUMNS})",
    ),
    "sorted_shards_score": (  # 15.0 s
        [("data.init_args.partition", _partition("SortedShards", score="nonexist"))],
        "data.partition.score 'nonexist': data.dataset 'synthetic:preferences' has no such column"
        f" (columns: {PREFERENCE_COLUMNS})",
    ),
    "by_key_key_short_class_path": (
        [("data.init_args.partition", {"class_path": "ByKey", "init_args": {"key": "author"}})],
        "data.partition.key 'author': data.dataset 'synthetic:preferences' has no such column"
        f" (columns: {PREFERENCE_COLUMNS})",
    ),
    "by_column_column": (
        [("data.init_args.partition", _partition("ByColumn", column="clients"))],
        "data.partition.column 'clients': data.dataset 'synthetic:preferences' has no such column"
        f" (columns: {PREFERENCE_COLUMNS})",
    ),
    "hard_preferences_key": (
        [
            ("data.init_args.dataset", "synthetic:hard_preferences"),
            ("data.init_args.partition", _partition("ByKey", key="flip")),
        ],
        "data.partition.key 'flip': data.dataset 'synthetic:hard_preferences' has no such column"
        f" (columns: {PREFERENCE_COLUMNS}, follows_group, flipped)",
    ),
    "by_key_group_fewer_than_clients": (  # `partition ByKey(key='group'): 1 distinct values ... cannot fill 4`
        [("data.init_args.partition", _partition("ByKey", key="group"))],
        "data.partition.key 'group': data.dataset 'synthetic:preferences' has 1 distinct 'group' value(s)"
        " (data.synthetic_args.groups: ['positive']), which cannot fill data.num_clients=4 clients;"
        " use num_clients <= 1",
    ),
    "lora_target_module": (  # the model's own line + hint, 14.7 s
        [("model.init_args.lora.target_modules", ["nonexistent_mod"])],
        "model.lora.target_modules: model type 'gpt2' has no module named 'nonexistent_mod'"
        " (Linear-like modules it has: c_attn, c_fc, c_proj, lm_head)",
    ),
    "lora_target_module_a_name_alone": (  # `lora.target_modules: Expected a <class 'list'>` + tip, 11 s
        [("model.init_args.lora.target_modules", "c_attn")],
        "model.lora.target_modules must be None or a non-empty list, got 'c_attn'",
    ),
    "n_head_divides_n_embd": (  # `embed_dim must be divisible by num_heads` + hint, 12.5 s
        [("model.init_args.backbone.config.n_head", 3)],
        "model.backbone.config.n_head=3 must divide model.backbone.config.n_embd=32"
        " (GPT2Config: each of the n_head attention heads takes n_embd / n_head dimensions)",
    ),
    "num_attention_heads_as_written": (
        [
            ("model.init_args.backbone.config.n_head", None),
            ("model.init_args.backbone.config.num_attention_heads", 5),
        ],
        "model.backbone.config.num_attention_heads=5 must divide model.backbone.config.n_embd=32"
        " (GPT2Config: each of the num_attention_heads attention heads takes n_embd / num_attention_heads"
        " dimensions)",
    ),
    "n_head_against_the_default_width": (
        [("model.init_args.backbone.config.n_embd", None), ("model.init_args.backbone.config.n_head", 5)],
        "model.backbone.config.n_head=5 must divide GPT2Config's default n_embd=768"
        " (GPT2Config: each of the n_head attention heads takes n_embd / n_head dimensions)",
    ),
    "groups_empty": (  # `planted_preferences: groups is empty` + hint, 15.4 s
        [("data.init_args.synthetic_args.groups", [])],
        "data.synthetic_args.groups must name at least one of ['casual', 'formal', 'negative', 'positive'], got []",
    ),
    "families_empty": (  # `planted_instructions: no family left after holding out []`, after the imports
        [
            ("data.init_args.dataset", "synthetic:instructions"),
            ("data.init_args.synthetic_args", {"examples_per_client": 8, "families": []}),
        ],
        "data.synthetic_args.families must name at least one of ['capitalize', 'count_words', 'drop_first',"
        " 'first_letters', 'last_word', 'repeat_first', 'replace_vowels', 'reverse_words', 'sort_words',"
        " 'uppercase'], got []",
    ),
    "families_per_client_above_the_families": (  # the generator's ValueError + hint, after the imports
        [
            ("data.init_args.dataset", "synthetic:instructions"),
            ("data.init_args.synthetic_args", {"examples_per_client": 8, "families": ["uppercase", "last_word"]}),
            ("data.init_args.synthetic_args.families_per_client", 3),
        ],
        "data.synthetic_args.families_per_client must be in [1, 2] (the families in use), got 3",
    ),
    "hard_preferences_purity": (  # `planted_hard_preferences: `purity` must be in (0.5, 1]`, after the imports
        [
            ("data.init_args.dataset", "synthetic:hard_preferences"),
            ("data.init_args.synthetic_args.purity", 0.5),
        ],
        "data.synthetic_args.purity must be in (0.5, 1], got 0.5",
    ),
}


@pytest.mark.parametrize(("changes", "line"), list(CASES.values()), ids=list(CASES))
def test_a_data_or_model_option_is_refused_before_torch_naming_the_file(tmp_path, changes, line):
    config = yaml.safe_load(yaml.safe_dump(TINY))
    for path, value in changes:
        _set(config, path, value)
    assert_config_refused_before_torch(tmp_path, config, line, name="my.yaml")


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_a_partition_column_a_local_file_lacks_is_refused_before_torch(tmp_path, suffix):
    """The columns of a local file are its header (csv, parquet's schema) or its rows' keys (json)."""
    data = tmp_path / "data"
    data.mkdir()
    dataset = _write_data(data, suffix)
    config = yaml.safe_load(yaml.safe_dump(TINY))
    config["data"]["init_args"].update(dataset=dataset, partition=_partition("ByKey", key="writer"))
    config["data"]["init_args"].pop("synthetic_args")
    line = (
        f"data.partition.key 'writer': data.dataset {dataset!r} has no such column"
        " (columns: prompt, chosen, rejected, author)"
    )
    assert_config_refused_before_torch(tmp_path, config, line, name="my.yaml")


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_partition_column_a_local_file_has_goes_on(tmp_path, suffix):
    """A column the file has (``author``, or ``writer`` renamed from it by no field_map) is not refused:
    the child goes on to the live parser (and stops at torch)."""
    data = tmp_path / "data"
    data.mkdir()
    dataset = _write_data(data, suffix)
    config = yaml.safe_load(yaml.safe_dump(TINY))
    # two authors make two clients (fewer clients than authors: tests/test_data_fit_errors_cli.py)
    config["data"]["init_args"].update(dataset=dataset, partition=_partition("ByKey", key="author"), num_clients=2)
    config["data"]["init_args"].pop("synthetic_args")
    path = tmp_path / "my.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    proc = lightning_fed_without_torch("fit", "--config", str(path), cwd=tmp_path, hook=tmp_path / "hook")
    assert REACHED_TORCH in proc.stderr


def test_a_column_renamed_by_field_map_is_the_partition_s(tmp_path):
    """``field_map: {prompt: question}`` renames ``question`` to ``prompt``: ``question`` is no column then,
    and the line says what it is read as (red team 15 L1: the renamed columns were listed instead)."""
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"question": r["prompt"], **{k: v for k, v in r.items() if k != "prompt"}} for r in ROWS]
    dataset = data / "pairs.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    config = yaml.safe_load(yaml.safe_dump(TINY))
    init = config["data"]["init_args"]
    init.update(dataset=str(dataset), field_map={"prompt": "question"}, partition=_partition("ByKey", key="question"))
    init.pop("synthetic_args")
    path = tmp_path / "my.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    proc = lightning_fed_without_torch("fit", "--config", str(path), cwd=tmp_path, hook=tmp_path / "hook")
    line = (
        f"data.partition.key 'question': data.dataset {str(dataset)!r}: data.field_map reads column 'question'"
        " as 'prompt'; name it 'prompt'"
    )
    assert (proc.returncode, proc.stderr) == (2, f"error: config {str(path)!r}: {line}\n")


# ----------------------------------------------------------------------------- the tables, against the live code
def test_the_planted_sets_columns_read_from_source_are_the_generators():
    from lightning_fed.datamodules.synthetic import SYNTHETIC
    from lightning_fed.nested_options import generator_columns

    for name, generator in SYNTHETIC.items():
        assert generator_columns(f"synthetic:{name}") == generator(num_clients=2, examples_per_client=2).column_names


def test_the_partitioners_column_options_are_declared():
    """Every partitioner's ``str`` field names a column (:data:`PARTITION_COLUMNS`), with its default."""
    import dataclasses

    import lightning_fed.datamodules.partition as partition
    from lightning_fed.data_cross_rules import PARTITION_COLUMNS, PARTITION_DEFAULTS

    found, defaults = {}, {}
    for name in partition.PARTITIONERS.values():
        for field in dataclasses.fields(name):
            if field.type in ("str", str):
                found[name.__name__] = field.name
                if field.default is not dataclasses.MISSING:
                    defaults[name.__name__] = field.default
    assert (found, defaults) == (PARTITION_COLUMNS, PARTITION_DEFAULTS)


def test_the_data_modules_that_partition_their_source_as_read_are_declared():
    import lightning_fed.datamodules as datamodules
    from lightning_fed.data_cross_rules import READS_ITS_SOURCE
    from lightning_fed.option_rules import DATA_RULES

    keep = {
        n for n in DATA_RULES if getattr(datamodules, n).load_records is datamodules.FederatedDataModule.load_records
    }
    assert keep == READS_ITS_SOURCE


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_a_local_file_s_columns_are_the_data_source_s(tmp_path, suffix):
    from lightning_fed.data_cross_rules import field_mapped, local_columns
    from lightning_fed.datamodules.sources import apply_field_map, read_source

    dataset = _write_data(tmp_path, suffix)
    live = read_source(dataset)
    assert local_columns(dataset) == live.column_names
    field_map = {"prompt": "author"}  # `prompt` is dropped, `author` renamed to it
    assert (
        field_mapped(local_columns(dataset), field_map)
        == apply_field_map(live, "preference", dataset, field_map).column_names
    )


@pytest.mark.parametrize(
    ("option", "refused", "taken"), [("label_noise", 0.5, 0.0), ("distractor", 1.01, 1.0), ("purity", 0.5, 1.0)]
)
def test_the_generator_bounds_declared_are_the_generator_s(option, refused, taken):
    """:data:`~lightning_fed.nested_options.GENERATOR_RULES` against ``planted_hard_preferences`` itself."""
    from lightning_fed.datamodules.synthetic import planted_hard_preferences
    from lightning_fed.nested_options import synthetic_args_problem

    def precheck(value: float) -> str | None:
        args = {"examples_per_client": 2, option: value}
        return synthetic_args_problem({"dataset": "synthetic:hard_preferences", "synthetic_args": args})

    with pytest.raises(ValueError, match=option):
        planted_hard_preferences(num_clients=2, examples_per_client=2, **{option: refused})
    assert precheck(refused) is not None
    planted_hard_preferences(num_clients=2, examples_per_client=2, **{option: taken})
    assert precheck(taken) is None


@pytest.mark.parametrize(("groups", "refused"), [(None, True), (["positive", "negative", "formal", "casual"], False)])
def test_a_by_key_group_partition_is_refused_where_the_live_partitioner_refuses_it(groups, refused):
    """The default groups (two) cannot fill four clients by ``group``; four groups can."""
    from lightning_fed.datamodules.partition import ByKey
    from lightning_fed.datamodules.synthetic import planted_preferences
    from lightning_fed.nested_options import partition_columns_problem

    args = {"examples_per_client": 2, **({"groups": groups} if groups else {})}
    partition = {"class_path": "ByKey", "init_args": {"key": "group"}}
    init = {"dataset": "synthetic:preferences", "num_clients": 4, "synthetic_args": args, "partition": partition}
    problem = partition_columns_problem("lightning_fed.datamodules.PreferenceDataModule", init)
    rows = planted_preferences(num_clients=4, **args)
    if refused:
        assert problem is not None and "has 2 distinct 'group' value(s)" in problem
        with pytest.raises(ValueError, match="2 distinct values of 'group' cannot fill 4 clients"):
            ByKey("group")(rows, 4, 0)
    else:
        assert problem is None
        ByKey("group")(rows, 4, 0)


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        ({"families": ["uppercase"]}, True),  # the default families_per_client (2) > 1 family
        ({"families": ["uppercase"], "families_per_client": 1}, False),
        ({"families": ["uppercase"], "held_out_families": ["uppercase"], "families_per_client": 1}, True),
        ({"held_out_families": ["uppercase"], "families_per_client": 9}, False),
        ({"families_per_client": 11}, True),
    ],
)
def test_the_families_in_use_are_refused_where_the_generator_refuses_them(args, refused):
    from lightning_fed.datamodules.synthetic_instructions import planted_instructions
    from lightning_fed.nested_options import synthetic_args_problem

    problem = synthetic_args_problem({"dataset": "synthetic:instructions", "synthetic_args": args})
    if refused:
        assert problem is not None
        with pytest.raises(ValueError, match="planted_instructions"):
            planted_instructions(num_clients=2, examples_per_client=2, **args)
    else:
        assert problem is None
        planted_instructions(num_clients=2, examples_per_client=2, **args)


def test_values_of_another_type_are_left_to_the_checks_that_name_them():
    """``families: null`` is every family; a list for ``model_type`` or ``num_clients: null`` is the
    type checks' (nested_options, class_options) to refuse: the new rules stay silent, never raise."""
    from lightning_fed.nested_options import partition_columns_problem, synthetic_args_problem
    from lightning_fed.transformers_configs import heads_problem, missing_modules_problem

    assert synthetic_args_problem({"dataset": "synthetic:instructions", "synthetic_args": {"families": None}}) is None
    assert heads_problem("model.backbone.config", {"model_type": [1, 2], "n_head": 3}) is None
    assert missing_modules_problem([1, 2], ["x"]) is None
    partition = {"class_path": "ByKey", "init_args": {"key": "group"}}
    init = {"dataset": "synthetic:preferences", "num_clients": 4, "synthetic_args": {"num_clients": None}}
    assert partition_columns_problem("PreferenceDataModule", {**init, "partition": partition}) is None
