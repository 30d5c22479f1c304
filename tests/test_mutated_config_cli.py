"""A copy of the shipped ``tiny`` config with one value made wrong is refused before torch is
imported, in one line naming the key, its value and the file (issue 41, the outside mutation run).

On 894fdde each of these was refused only after torch, Lightning and transformers were imported
(7-11 s of CPU), by jsonargparse or the class, in words naming no key (``model: argument of type
'float' is not iterable``, ``TypeError: planted_preferences() got an unexpected keyword argument
'examples_per_client_'``, ``TypeError: unhashable type: 'dict'``, ``Field 'n_layer' expected int,
got bool``), or misleadingly (``Option 'beta' is not accepted`` for a deleted ``class_path``). The
child processes cannot import torch (``tests/helpers/cli.py``), so a refusal that still needed the
live parser ends in that import error instead; each runs in an empty folder, which stays empty.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from huggingface_hub import constants

from lightning_fed.shipped_configs import resolve_config
from tests.helpers.cli import lightning_fed_without_torch
from tests.helpers.refusals import assert_config_refused_before_torch, assert_refused_before_torch, write_config

HUB_CACHE = constants.HF_HUB_CACHE
"""Where the children look for a hub id (the children's environment is this process's)."""
TINY = yaml.safe_load(Path(resolve_config("tiny")).read_text(encoding="utf-8"))
MODELS = (
    "BinarySelectorModule, DPOModule, FedPerModule, FedRepModule, ORPOModule, OffsiteModule, PDPOModule,"
    " PerFedAvgModule, PersonalHeadDPO, SFTModule, SimPOModule"
)


def _set(config: dict, path: str, value: object) -> None:
    *parents, last = path.split(".")
    for key in parents:
        config = config[int(key)] if isinstance(config, list) else config[key]
    if isinstance(config, list):
        config[int(last)] = value
    else:
        config[last] = value


def _rename(config: dict, path: str, new: str | None) -> None:
    *parents, last = path.split(".")
    for key in parents:
        config = config[key]
    value = config.pop(last)
    if new is not None:
        config[new] = value


CASES = {
    "class_path_float": (
        lambda c: _set(c, "model.class_path", -0.0),
        "model.class_path must be a class name or a dotted class path (e.g. lightning_fed.modules.DPOModule), got -0.0",
    ),
    "data_class_path_float": (
        lambda c: _set(c, "data.class_path", -0.0),
        "data.class_path must be a class name or a dotted class path"
        " (e.g. lightning_fed.datamodules.PreferenceDataModule), got -0.0",
    ),
    "class_path_blank": (
        lambda c: _set(c, "model.class_path", "  "),
        "model.class_path must be a class name or a dotted class path (e.g. lightning_fed.modules.DPOModule), got '  '",
    ),
    "class_path_renamed": (
        lambda c: _rename(c, "model.class_path", "class_pathx"),
        "model.class_pathx is not a key of model: (a class_path and its init_args); did you mean model.class_path?",
    ),
    "class_path_deleted": (
        lambda c: _rename(c, "model.class_path", None),
        "model.class_path is missing: its init_args are read as the base class FederatedModule's, which has no"
        f" option 'beta'; name the class (e.g. model.class_path: lightning_fed.modules.DPOModule; one of {MODELS})",
    ),
    "synthetic_args_key": (
        lambda c: _rename(c, "data.init_args.synthetic_args.examples_per_client", "examples_per_client_"),
        "data.synthetic_args.examples_per_client_ is not an option of planted_preferences (synthetic:preferences);"
        " did you mean data.synthetic_args.examples_per_client?",
    ),
    "synthetic_groups_mapping": (
        lambda c: _set(c, "data.init_args.synthetic_args.groups", [{}]),
        "data.synthetic_args.groups[0] must be a name (a string), got {}",
    ),
    "synthetic_groups_unknown": (
        lambda c: _set(c, "data.init_args.synthetic_args.groups", ["positive", "sarcastic"]),
        "data.synthetic_args.groups: unknown name 'sarcastic'; valid: ['casual', 'formal', 'negative', 'positive']",
    ),
    "synthetic_count_mapping": (
        lambda c: _set(c, "data.init_args.synthetic_args.examples_per_client", {"a": 1}),
        "data.synthetic_args.examples_per_client must be an integer, got {'a': 1}",
    ),
    "n_layer_bool": (
        lambda c: _set(c, "model.init_args.backbone.config.n_layer", False),
        "model.backbone.config.n_layer must be an integer, got False",
    ),
    "n_head_nan_word": (
        lambda c: _set(c, "model.init_args.backbone.config.n_head", "NaN"),
        "model.backbone.config.n_head must be an integer, got 'NaN'",
    ),
    "model_type_number": (
        lambda c: _set(c, "model.init_args.backbone.config.model_type", 1e308),
        "model.backbone.config.model_type must be a transformers model type (a string such as 'gpt2'), got 1e+308",
    ),
    "tokenizer_float": (
        lambda c: _set(c, "model.init_args.backbone.tokenizer", -0.0),
        "model.backbone.tokenizer must be a string or null, got -0.0",
    ),
    "dataset_bool": (
        lambda c: _set(c, "data.init_args.dataset", False),
        "data.dataset must be a string, got False",
    ),
    "dirichlet_alpha": (
        lambda c: _set(c, "data.init_args.partition", {"class_path": "Dirichlet", "init_args": {"alpha": -1}}),
        "data.partition.alpha must be > 0, got -1.0; data.partition.key is required by Dirichlet but missing",
    ),
    "partition_name_alone": (  # the live parser: `partition.key: required` and `tip: lightning-fed --help`
        lambda c: _set(c, "data.init_args.partition", "Dirichlet"),
        "data.partition.alpha is required by Dirichlet but missing;"
        " data.partition.key is required by Dirichlet but missing",
    ),
    "partition_key": (
        lambda c: _set(
            c, "data.init_args.partition", {"class_path": "Dirichlet", "init_args": {"alpha": 1, "kye": "client"}}
        ),
        "data.partition.kye is not an option of Dirichlet; did you mean data.partition.key?",
    ),
    # The second outside run (2026-11-29, from the wheel): exit 1 after the imports, or a run that never ended.
    "trainer_not_a_mapping": (  # AttributeError: 'int' object has no attribute 'get'
        lambda c: _set(c, "trainer", 5),
        "trainer must be a mapping of its options (trainer: {max_epochs: 3, ...}), got 5",
    ),
    "federation_a_list": (  # TypeError: ... argument after ** must be a mapping
        lambda c: _set(c, "federation", [1]),
        "federation must be a mapping of its options (federation: {rounds: 3, ...}), got [1]",
    ),
    "dataset_null": (  # AttributeError: 'NoneType' object has no attribute 'startswith'
        lambda c: _set(c, "data.init_args.dataset", None),
        "data.dataset must be a string, got None",
    ),
    "n_head_zero": (  # ZeroDivisionError: integer division or modulo by zero
        lambda c: _set(c, "model.init_args.backbone.config.n_head", 0),
        "model.backbone.config.n_head must be >= 1, got 0",
    ),
    "n_layer_huge": (  # 2**40 layers: no output, memory growing until it was killed
        lambda c: _set(c, "model.init_args.backbone.config.n_layer", 2**40),
        "model.backbone.config: about 1.35e+16 weights, more than 2e+09 (lightning_fed/limits.py): a model built"
        " from a config has random weights; load a pretrained one with backbone.name_or_path",
    ),
    # The third outside run (issue 41): a scalar or a list where a mapping or a class goes, a key of a
    # class-valued option mistyped. Each was refused after the imports (8-12.5 s of CPU), as
    # `Not a valid subclass of Strategy Subclass types expect one of:` (cut there), `Expected a <class
    # 'list'>`, or `unknown class_path 'lightning_fed.modules.DPOModule' ('list' object has no ...)`.
    "model_init_args_list": (
        lambda c: _set(c, "model.init_args", [1, 2]),
        "model.init_args must be a mapping of the class's options, got [1, 2]",
    ),
    "data_init_args_empty_list": (
        lambda c: _set(c, "data.init_args", []),
        "data.init_args must be a mapping of the class's options, got []",
    ),
    "model_a_number": (
        lambda c: _set(c, "model", 1e-300),
        "model must be a class name or a mapping of its class_path and init_args"
        " (e.g. model: {class_path: lightning_fed.modules.DPOModule}), got 1e-300",
    ),
    "data_a_number": (
        lambda c: _set(c, "data", -0.0),
        "data must be a class name or a mapping of its class_path and init_args"
        " (e.g. data: {class_path: lightning_fed.datamodules.PreferenceDataModule}), got -0.0",
    ),
    "strategy_a_number": (
        lambda c: _set(c, "federation.strategy", 5),
        "federation.strategy must be a class name or a mapping of its class_path and init_args"
        " (e.g. federation.strategy: {class_path: lightning_fed.strategies.FedAvg}), got 5",
    ),
    "strategy_class_path_typo": (
        lambda c: _set(c, "federation.strategy", {"class_path_": 1}),
        "federation.strategy.class_path_ is not a key of federation.strategy: (a class_path and its init_args);"
        " did you mean federation.strategy.class_path?",
    ),
    "strategy_class_path_typo_beside": (
        lambda c: _set(c, "federation.strategy.class_pathh", 1),
        "federation.strategy.class_pathh is not a key of federation.strategy: (a class_path and its init_args);"
        " did you mean federation.strategy.class_path?",
    ),
    "hooks_a_number": (
        lambda c: _set(c, "federation.hooks", 5),
        "federation.hooks must be a list of round hooks, each a class name or a mapping of its class_path and"
        " init_args (e.g. federation.hooks: [{class_path: lightning_fed.round_hooks.ClientGrouping}]), got 5",
    ),
    "hook_class_name_typo": (  # already refused before torch on baaf8e7: kept with the cases it was reported with
        lambda c: _set(c, "federation.hooks", [{"class_path": "lightning_fed.round_hooks.ClientGroupingg"}]),
        "federation.hooks[0]: unknown class_path 'lightning_fed.round_hooks.ClientGroupingg';"
        " did you mean lightning_fed.round_hooks.ClientGrouping?",
    ),
    "privacy_a_number": (
        lambda c: _set(c, "federation.privacy", 4),
        "federation.privacy must be a mapping of its options (federation.privacy: {target_epsilon: 8.0, ...}), got 4",
    ),
    "privacy_key_typo": (
        lambda c: _set(c, "federation.privacy", {"epsilonn": 4}),
        "federation.privacy.epsilonn is not an option of PrivacyConfig;"
        " did you mean federation.privacy.target_epsilon?",
    ),
    "privacy_key_short": (
        lambda c: _set(c, "federation.privacy", {"epsilon": -4}),
        "federation.privacy.epsilon is not an option of PrivacyConfig; did you mean federation.privacy.target_epsilon?",
    ),
    "callbacks_a_number": (
        lambda c: _set(c, "trainer.callbacks", 5),
        "trainer.callbacks must be a callback or a list of callbacks, each a class name or a mapping of its"
        " class_path and init_args"
        " (e.g. trainer.callbacks: [{class_path: lightning.pytorch.callbacks.ModelCheckpoint}]), got 5",
    ),
    "lightning_callback_option_typo": (
        lambda c: _set(
            c,
            "trainer.callbacks",
            [{"class_path": "lightning.pytorch.callbacks.EarlyStopping", "init_args": {"patiencee": 3}}],
        ),
        "trainer.callbacks[0].patiencee is not an option of EarlyStopping; did you mean trainer.callbacks[0].patience?",
    ),
    "partition_short_name_typo": (
        lambda c: _set(
            c, "data.init_args.partition", {"class_path": "Dirichlett", "init_args": {"alpha": 1, "key": "client"}}
        ),
        "data.partition: unknown class_path 'Dirichlett'; did you mean Dirichlet?",
    ),
    "default_root_dir_a_number": (
        lambda c: _set(c, "trainer.default_root_dir", 5),
        "trainer.default_root_dir must be a folder's path (a string) or null, got 5",
    ),
    "partition_class_name_typo": (
        lambda c: _set(
            c,
            "data.init_args.partition",
            {
                "class_path": "lightning_fed.datamodules.partition.Dirichlett",
                "init_args": {"alpha": 1, "key": "client"},
            },
        ),
        "data.partition: class_path 'lightning_fed.datamodules.partition.Dirichlett': module"
        " 'lightning_fed.datamodules.partition' has no class 'Dirichlett'; did you mean"
        " lightning_fed.datamodules.partition.Dirichlet?",
    ),
    # The third outside run (issue 41, on baaf8e7): a value rule's line named no file and came with the
    # --debug hint; the others were refused after the imports (12-15 s of CPU) or not at all.
    "rounds_negative": (
        lambda c: _set(c, "federation.rounds", -1),
        "federation.rounds must be in [1, 1000000], got -1",
    ),
    "lr_negative": (lambda c: _set(c, "model.init_args.lr", -1), "model.lr must be in (0, 10.0], got -1.0"),
    "weight_decay_negative": (  # the fourth outside run: torch's AdamW refused it after a log file was written
        lambda c: _set(c, "model.init_args.weight_decay", -1),
        "model.weight_decay must be >= 0, got -1.0",
    ),
    "examples_per_client_negative": (
        lambda c: _set(c, "data.init_args.synthetic_args.examples_per_client", -3),
        "data.synthetic_args.examples_per_client must be >= 1, got -3",
    ),
    "examples_per_client_huge": (  # planted_preferences drew them (exit 2 after the imports, 13 s)
        lambda c: _set(c, "data.init_args.synthetic_args.examples_per_client", 10_000_000),
        "data.num_clients=4 x data.synthetic_args.examples_per_client=10000000 = 40000000 rows: a synthetic set"
        " holds at most 1000000 (about 1 KiB each while drawn); use fewer, or a data file",
    ),
    "dataset_no_such_file": (
        lambda c: _set(c, "data.init_args.dataset", "./nope.jsonl"),
        "data.dataset './nope.jsonl': no such file or folder (supported: .json, .jsonl, .csv, .parquet files or a"
        " folder of them; a hub name is owner/name)",
    ),
    "tokenizer_path_missing": (
        lambda c: _set(c, "model.init_args.backbone.tokenizer", "./no_tokenizer"),
        "model.backbone.tokenizer: local path './no_tokenizer' does not exist",
    ),
    "tokenizer_hub_id_offline": (  # the children run offline (tests/helpers/cli.py): 12 s, naming no option
        lambda c: _set(c, "model.init_args.backbone.tokenizer", "abc"),
        f"model.backbone.tokenizer 'abc': no such local folder, and not in the hub cache ({HUB_CACHE}) while offline"
        " (HF_HUB_OFFLINE=1: nothing is downloaded)",
    ),
    "backbone_config_key_misspelt": (  # transformers kept it unread: a 768-wide GPT-2 trained (81 s of CPU)
        lambda c: _rename(c, "model.init_args.backbone.config.n_embd", "n_embd_"),
        "model.backbone.config.n_embd_ is not an option of GPT2Config (model_type gpt2);"
        " did you mean model.backbone.config.n_embd?",
    ),
}


@pytest.mark.parametrize(("mutate", "line"), list(CASES.values()), ids=list(CASES))
def test_a_mutated_tiny_config_is_refused_in_one_line_naming_the_key_and_the_file(tmp_path, mutate, line):
    config = yaml.safe_load(yaml.safe_dump(TINY))
    mutate(config)
    assert_config_refused_before_torch(tmp_path, config, line, name="tiny.yaml")


DATA_5 = (
    "data must be a class name or a mapping of its class_path and init_args"
    " (e.g. data: {class_path: lightning_fed.datamodules.PreferenceDataModule}), got 5"
)
FEDERATION_5 = "federation must be a mapping of its options (federation: {rounds: 3, ...}), got 5"


@pytest.mark.parametrize(
    ("before", "option", "line"),
    [
        (False, "--data=5", DATA_5),
        (False, "--model.init_args=[1]", "model.init_args must be a mapping of the class's options, got [1]"),
        # refused before torch on baaf8e7 already: kept beside --data=5, with which it was reported
        (False, "--federation=5", FEDERATION_5),
        (True, "--data=5", DATA_5),
        (True, "--federation=5", FEDERATION_5),
    ],
    ids=["data_after", "init_args_after", "federation_after", "data_before", "federation_before"],
)
def test_a_number_for_a_section_on_the_command_line_is_refused_naming_no_file(tmp_path, before, option, line):
    """``--data=5`` after a good config (issue 41's third outside run: ``Not a valid subclass of
    FederatedDataModule Subclass types expect one of:`` after the imports), or before it (``federation:
    Unable to load config '5'`` after the imports, though the file gives the section later): the
    command line brought it, so the line names no file."""
    path = write_config(tmp_path, TINY, "tiny.yaml")
    args = [option, "--config", str(path)] if before else ["--config", str(path), option]
    assert_refused_before_torch(tmp_path, ["fit", *args], line)


def test_a_hub_data_set_name_is_left_to_the_data_module(tmp_path):
    """``org/name`` is a hub name, not a path (as the data source tells them apart,
    lightning_fed/data_paths.py): not refused here, the run goes on to the live parser."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed_without_torch(
        "fit", "--config", "tiny", "--data.init_args.dataset=org/name", cwd=cwd, hook=tmp_path / "hook"
    )
    assert "torch imported before the config was checked" in proc.stderr
    assert "data.dataset" not in proc.stderr


def test_a_string_option_given_on_the_command_line_is_its_text(tmp_path):
    """The parser keeps ``--data.init_args.dataset=123`` as the text ``'123'`` (a path or a hub
    name): not refused as a number here; the run goes on to the live parser."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = lightning_fed_without_torch(
        "fit", "--config", "tiny", "--model.init_args.backbone.tokenizer=5", cwd=cwd, hook=tmp_path / "hook"
    )
    assert "torch imported before the config was checked" in proc.stderr
    assert "must be a string" not in proc.stderr


def test_an_alias_inside_its_own_anchor_is_refused_naming_the_line(tmp_path):
    """``a: &x [*x]`` is a list that contains itself: every reader of the config would follow it
    forever (it was ``RecursionError``, exit 1, from the duplicate-key scan). A shared alias that
    does not contain itself is YAML's ordinary reuse and passes that scan."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for text in ("a: &x [*x]\n", "model: &x {init_args: {b: *x}}\n"):
        path = tmp_path / "c.yaml"
        path.write_text(text, encoding="utf-8")
        proc = lightning_fed_without_torch("fit", "--config", str(path), cwd=cwd, hook=tmp_path / "hook")
        line = "line 1: an alias refers to the anchor that contains it (a recursive value)"
        assert (proc.returncode, proc.stderr) == (2, f"error: config {str(path)!r}: {line}\n")
    (tmp_path / "c.yaml").write_text("a: &x [1]\nb: *x\n", encoding="utf-8")
    proc = lightning_fed_without_torch("fit", "--config", str(tmp_path / "c.yaml"), cwd=cwd, hook=tmp_path / "hook")
    assert "recursive" not in proc.stderr and proc.returncode == 2  # refused for its unknown keys instead
    assert list(cwd.iterdir()) == []
