"""A second config file is merged over the first as jsonargparse merges it (outside test round 9,
rows 6 and 7; :mod:`lightning_fed.config_merging`).

On 9e8f7fb the precheck merged every mapping key by key, so valid configs were refused before
torch: a wrapper's ``strategy`` swapped in a second file (``FedAdam`` -> ``FedProx``) kept
FedAdam's ``beta_1`` (``federation.strategy.strategy.beta_1 is not an option of FedProx``), and a
second file's ``backbone.config`` of another model family kept the first file's GPT-2 keys
(``model.backbone.config.n_layer is not an option of LlamaConfig``), where the parser replaces a
``dict``-typed value whole and keeps, on a class change, only the options the new class takes.

Each case's merged values were read from ``--print_config`` (the parser's merge);
:func:`test_the_precheck_merges_as_the_live_parser_prints` compares them with the parser again.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import yaml

from lightning_fed.config_values import merged_config
from lightning_fed.shipped_configs import resolve_config
from tests.helpers.cli import REACHED_TORCH, lightning_fed, lightning_fed_without_torch
from tests.helpers.refusals import assert_refused_before_torch

DP_PROX = {
    "federation": {
        "strategy": {
            "class_path": "lightning_fed.privacy.ClientLevelDP",
            "init_args": {"strategy": {"class_path": "FedProx", "init_args": {"mu": 0.01}}},
        }
    }
}
"""Row 6's second file over ``feddpo_dp`` (ClientLevelDP over FedAdam)."""
LLAMA = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4}
LLAMA.update(intermediate_size=64, max_position_embeddings=256)
HDS = "lightning_fed.selection.HierarchicalDataSelection"
CASES = {
    # name: (shipped config, second file, {option path: the parser's merged value})
    "backbone_config_replaced": (
        "tiny",
        {"model": {"init_args": {"backbone": {"config": {"model_type": "gpt2", "n_layer": 3}}}}},
        {"model.backbone.config": {"model_type": "gpt2", "n_layer": 3}, "model.backbone.tokenizer": "bytes"},
    ),
    "backbone_config_other_family": (  # row 7
        "tiny",
        {"model": {"init_args": {"backbone": {"config": LLAMA}}}},
        {"model.backbone.config": LLAMA},
    ),
    "backbone_fields_merged": (
        "tiny",
        {"model": {"init_args": {"backbone": {"tokenizer": "bytes"}}}},
        {"model.backbone.config": {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 256}},
    ),
    "lora_fields_merged": (
        "tiny",
        {"model": {"init_args": {"lora": {"r": 8}}}},
        {"model.lora.r": 8, "model.lora.alpha": 8, "model.lora.dropout": 0.0},
    ),
    "synthetic_args_replaced": (
        "tiny",
        {"data": {"init_args": {"synthetic_args": {"examples_per_client": 12}}}},
        {"data.synthetic_args": {"examples_per_client": 12}},
    ),
    "hook_items_merged_anchor_args_replaced": (
        "fedhds",
        {
            "federation": {
                "hooks": [
                    {"class_path": HDS, "init_args": {"anchor_args": {"seed": 3}}},
                    {
                        "class_path": "lightning_fed.evaluation.heldout.HeldOutRouge",
                        "init_args": {"max_new_tokens": 16},
                    },
                ]
            }
        },
        {
            "federation.hooks.0.anchor_args": {"seed": 3},
            "federation.hooks.0.anchors": "synthetic:instructions",
            "federation.hooks.0.num_anchors": 64,
            "federation.hooks.1.max_new_tokens": 16,
            "federation.hooks.1.every_n_rounds": 5,
        },
    ),
    "hook_list_of_another_length_replaced": (
        "fedhds",
        {"federation": {"hooks": [{"class_path": HDS, "init_args": {"num_anchors": 32}}]}},
        {"federation.hooks.0.num_anchors": 32},
    ),
    "wrapped_strategy_swapped": (  # row 6: FedAdam's beta_1 dropped, its server_lr kept
        "feddpo_dp",
        DP_PROX,
        {"federation.strategy.strategy.mu": 0.01, "federation.strategy.strategy.server_lr": 0.01},
    ),
    "wrapped_strategy_merged": (
        "feddpo_dp",
        {
            "federation": {
                "strategy": {
                    "class_path": "lightning_fed.privacy.ClientLevelDP",
                    "init_args": {
                        "strategy": {"class_path": "lightning_fed.strategies.FedAdam", "init_args": {"tau": 0.01}}
                    },
                }
            }
        },
        {"federation.strategy.strategy.tau": 0.01, "federation.strategy.strategy.beta_1": 0.9},
    ),
    "strategy_swapped": (
        "tiny",
        {"federation": {"strategy": {"class_path": "FedProx", "init_args": {"mu": 0.01}}}},
        {"federation.strategy.mu": 0.01},
    ),
}
ABSENT = object()
DROPPED = {
    "wrapped_strategy_swapped": {
        "federation.strategy.strategy.beta_1": ABSENT,
        "federation.strategy.strategy.tau": ABSENT,
    },
    "hook_list_of_another_length_replaced": {
        "federation.hooks.0.anchors": None,
        "federation.hooks.0.anchor_args": None,
    },
}
"""Options of the first file the parser drops (a class change, a list replaced): absent from the
precheck's merge, absent or the class's default (``None``) in the parser's."""


def _files(tmp_path: Path, name: str) -> list[str]:
    shipped, second, _ = CASES[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(second), encoding="utf-8")
    return ["--config", resolve_config(shipped), "--config", str(path)]


def _precheck_value(sections: dict, option: str) -> object:
    """``option`` (``model.lora``, ``federation.hooks.0.anchors``, ``federation.strategy.strategy.mu``)
    in the precheck's merged sections, ``init_args`` left out as messages name options."""
    parts = option.split(".")
    if parts[0] == "federation" and parts[1] in ("strategy", "hooks"):
        value, parts = sections[f"federation.{parts[1]}"], parts[2:]
    else:
        value, parts = sections[parts[0]], parts[1:]
    for part in parts:
        if isinstance(value, list):
            value = value[int(part)]
            continue
        if isinstance(value, dict) and "class_path" in value:
            value = value.get("init_args", {})
        value = value[part]
    if isinstance(value, dict) and "class_path" in value:
        value = value.get("init_args", {})
    return value


def _has(sections: dict, option: str) -> bool:
    try:
        _precheck_value(sections, option)
    except KeyError:
        return False
    return True


@pytest.mark.parametrize("name", list(CASES))
def test_the_precheck_merges_a_second_file_as_the_parser_does(tmp_path, name):
    merged = merged_config(_files(tmp_path, name))
    assert merged is not None
    for option, value in CASES[name][2].items():
        assert _precheck_value(merged.sections, option) == value, option
    for option in DROPPED.get(name, ()):
        assert not _has(merged.sections, option), option


INIT_ARGS = "--model.init_args={backbone: {config: {model_type: gpt2, n_layer: 3}}, lora: {r: 8}}"
"""Options given as one mapping on the command line, merged as a second file's (checked with ``--print_config``)."""


def test_init_args_given_on_the_command_line_are_merged_as_a_file_s():
    merged = merged_config(["--config", resolve_config("tiny"), INIT_ARGS])
    assert merged is not None
    backbone = merged.sections["model"]["init_args"]["backbone"]
    assert backbone == {"config": {"model_type": "gpt2", "n_layer": 3}, "tokenizer": "bytes"}
    assert merged.sections["model"]["init_args"]["lora"] == {"r": 8, "alpha": 8, "dropout": 0.0}


def test_another_model_family_given_on_the_command_line_goes_on_to_the_live_parser(tmp_path):
    """Before: ``error: model.backbone.config.n_layer is not an option of LlamaConfig ...`` (exit 2)."""
    llama = yaml.safe_dump({"backbone": {"config": LLAMA}}, default_flow_style=True).strip()
    proc = lightning_fed_without_torch(
        "fit", "--config", "tiny", f"--model.init_args={llama}", "--print_config", cwd=tmp_path, hook=tmp_path / "hook"
    )
    assert REACHED_TORCH in proc.stderr, proc.stderr


def test_a_wrapped_strategy_swapped_in_a_second_file_goes_on_to_the_live_parser(tmp_path):
    """Row 6. Before: ``error: config '...': federation.strategy.strategy.beta_1 is not an option
    of FedProx; its options: mu, server_lr, weighting`` (exit 2)."""
    proc = lightning_fed_without_torch(
        "fit", *_files(tmp_path, "wrapped_strategy_swapped"), "--print_config", cwd=tmp_path, hook=tmp_path / "hook"
    )
    assert REACHED_TORCH in proc.stderr, proc.stderr


def test_another_model_family_in_a_second_file_goes_on_to_the_live_parser(tmp_path):
    """Row 7. Before: ``error: config '...': model.backbone.config.n_layer is not an option of
    LlamaConfig (model_type llama); its options: ...`` (exit 2)."""
    proc = lightning_fed_without_torch(
        "fit", *_files(tmp_path, "backbone_config_other_family"), "--print_config", cwd=tmp_path, hook=tmp_path / "hook"
    )
    assert REACHED_TORCH in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("shipped", "second", "line"),
    [
        (
            "feddpo_dp",
            {
                "federation": {
                    "strategy": {
                        "class_path": "lightning_fed.privacy.ClientLevelDP",
                        "init_args": {"strategy": {"class_path": "FedProx", "init_args": {"mu": -1}}},
                    }
                }
            },
            "federation.strategy.strategy.mu must be > 0, got -1.0",
        ),
        (
            "feddpo_dp",
            {
                "federation": {
                    "strategy": {
                        "class_path": "lightning_fed.privacy.ClientLevelDP",
                        "init_args": {"strategy": {"class_path": "FedAvgM", "init_args": {"momentu": 0.9}}},
                    }
                }
            },
            "federation.strategy.strategy.momentu is not an option of FedAvgM;"
            " did you mean federation.strategy.strategy.momentum?",
        ),
        (
            "tiny",
            {"model": {"init_args": {"backbone": {"config": {**LLAMA, "num_key_value_heads": 3}}}}},
            "model.backbone.config.num_key_value_heads=3 must divide model.backbone.config.num_attention_heads=4"
            " (LlamaConfig: each key/value head serves num_attention_heads / num_key_value_heads attention heads)",
        ),
    ],
    ids=["wrapped_mu", "wrapped_unknown_option", "llama_kv_heads"],
)
def test_a_real_mistake_in_the_second_file_is_still_refused_naming_it(tmp_path, shipped, second, line):
    """Before, the first two were hidden behind ``beta_1 is not an option of FedProx`` / ``FedAvgM``,
    the third behind ``n_layer is not an option of LlamaConfig``."""
    path = tmp_path / "second.yaml"
    path.write_text(yaml.safe_dump(second), encoding="utf-8")
    args = ["fit", "--config", resolve_config(shipped), "--config", str(path), "--print_config"]
    assert_refused_before_torch(tmp_path, args, line, config_file=path)


def _printed(args: list[str]) -> dict:
    """The parser's merge of ``args`` (``--print_config`` in-process: no precheck), ``init_args`` left out."""
    from lightning_fed.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        main([*args, "--print_config"], run=False)
    assert exit_.value.code in (0, None)
    return yaml.safe_load(out.getvalue())


def _printed_value(config: dict, option: str) -> object:
    value: object = config
    for part in option.split("."):
        if isinstance(value, dict) and "class_path" in value:
            value = value["init_args"]
        value = value[int(part)] if isinstance(value, list) else value[part]
    if isinstance(value, dict) and "class_path" in value:
        value = value["init_args"]
    return value


@pytest.mark.slow  # the LightningCLI's parser: torch, Lightning and transformers imported (~15 s)
@pytest.mark.parametrize("name", list(CASES))
def test_the_precheck_merges_as_the_live_parser_prints(tmp_path, name):
    """Each case's values are the parser's (``--print_config``), and what it drops the precheck drops."""
    printed = _printed(_files(tmp_path, name))
    for option, value in CASES[name][2].items():
        assert _printed_value(printed, option) == value, option
    for option, default in DROPPED.get(name, {}).items():
        try:
            assert _printed_value(printed, option) == default, option
        except KeyError:
            assert default is ABSENT, option


@pytest.mark.slow  # two subprocesses through the live parser (~15 s each)
@pytest.mark.parametrize("name", ["wrapped_strategy_swapped", "backbone_config_other_family"])
def test_the_rows_print_their_config(tmp_path, name):
    """Rows 6 and 7 exit 0 from ``--print_config``, printing the second file's values."""
    proc = lightning_fed("fit", *_files(tmp_path, name), "--print_config", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    printed = yaml.safe_load(proc.stdout)
    for option, value in CASES[name][2].items():
        assert _printed_value(printed, option) == value, option
