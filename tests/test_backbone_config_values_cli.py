"""``model.backbone.config`` values its model refuses only once built, refused before torch is imported
in one line naming the option, the value and the file (red team 8, rows 3 and 4;
lightning_fed/transformers_configs.py's ``config_values_problem``, class_options.py's ``tokenizer_size``).

On 52f9c49 each was found after torch, Lightning and transformers were imported (11-15 s of CPU), in
two lines naming no option: ``vocab_size: 10`` below the bytes tokenizer's 259 ids and Llama's
``num_key_value_heads`` not dividing its heads exited 1 after a run folder was written
(``IndexError: index out of range in self``, ``The size of tensor a (4) must match ...``),
``n_inner: -4`` too (``negative dimension``); ``activation_function: gelu_nw`` (``KeyError``),
``attn_pdrop: 2.0`` and ``layer_norm_epsilon: -1`` exited 2 after the imports. The children cannot
import torch (``tests/helpers/cli.py``); each runs in an empty folder, which stays empty.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from lightning_fed.shipped_configs import resolve_config
from tests.helpers.refusals import assert_config_refused_before_torch, assert_refused_before_torch

TINY = yaml.safe_load(Path(resolve_config("tiny")).read_text(encoding="utf-8"))
CONFIG = "model.backbone.config"
LLAMA = {
    "model_type": "llama",
    "num_hidden_layers": 1,
    "hidden_size": 32,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 256,
}
CASES = {
    "vocab_small": (
        {"vocab_size": 10},
        f"{CONFIG}.vocab_size=10 is below the tokenizer's 259 tokens (each token id needs an embedding row);"
        " leave vocab_size out to take the tokenizer's",
    ),
    "n_inner_negative": ({"n_inner": -4}, f"{CONFIG}.n_inner must be >= 1, got -4"),
    "activation_typo": (
        {"activation_function": "gelu_nw"},
        f"{CONFIG}.activation_function 'gelu_nw' is no activation of the installed transformers;"
        " did you mean 'gelu_new'?",
    ),
    "dropout_above_one": ({"attn_pdrop": 2.0}, f"{CONFIG}.attn_pdrop must be a probability in [0, 1], got 2.0"),
    "dropout_negative": ({"resid_pdrop": -0.1}, f"{CONFIG}.resid_pdrop must be a probability in [0, 1], got -0.1"),
    "epsilon_negative": (
        {"layer_norm_epsilon": -1},
        f"{CONFIG}.layer_norm_epsilon must be a number > 0 (such as 1e-05), got -1",
    ),
    "epsilon_int": (
        {"layer_norm_epsilon": 1},
        f"{CONFIG}.layer_norm_epsilon must be a float (1.0, not 1): GPT2Config refuses an int there",
    ),
}


@pytest.mark.parametrize(("change", "line"), list(CASES.values()), ids=list(CASES))
def test_a_backbone_config_value_its_model_refuses_is_refused_before_torch(tmp_path, change, line):
    config = yaml.safe_load(yaml.safe_dump(TINY))
    config["model"]["init_args"]["backbone"]["config"].update(change)
    assert_config_refused_before_torch(tmp_path, config, line, name="my.yaml")


def test_llama_key_value_heads_that_do_not_divide_the_heads_are_refused_before_torch(tmp_path):
    config = yaml.safe_load(yaml.safe_dump(TINY))
    config["model"]["init_args"]["backbone"]["config"] = {**LLAMA, "num_key_value_heads": 3}
    line = (
        f"{CONFIG}.num_key_value_heads=3 must divide {CONFIG}.num_attention_heads=4"
        " (LlamaConfig: each key/value head serves num_attention_heads / num_key_value_heads attention heads)"
    )
    assert_config_refused_before_torch(tmp_path, config, line, name="my.yaml")


@pytest.mark.parametrize(("model_type", "name"), [("qwen2", "Qwen2Config"), ("mistral", "MistralConfig")])
def test_key_value_heads_of_any_grouped_query_config_are_refused_before_torch_and_by_print_config(
    tmp_path, model_type, name
):
    """Red team 9 rows 2 and 5 (q_kv, m_kv): on 9e8f7fb the check knew llama alone; qwen2 and mistral with
    ``num_key_value_heads: 3`` of 4 heads exited 1 after a run folder (``The size of tensor a (4) must
    match ...``), and ``--print_config`` printed them, exit 0."""
    config = yaml.safe_load(yaml.safe_dump(TINY))
    config["model"]["init_args"]["backbone"]["config"] = {**LLAMA, "model_type": model_type, "num_key_value_heads": 3}
    line = (
        f"{CONFIG}.num_key_value_heads=3 must divide {CONFIG}.num_attention_heads=4"
        f" ({name}: each key/value head serves num_attention_heads / num_key_value_heads attention heads)"
    )
    (tmp_path / "fit").mkdir()
    (tmp_path / "print").mkdir()
    path = assert_config_refused_before_torch(tmp_path / "fit", config, line, name="my.yaml")
    assert_refused_before_torch(
        tmp_path / "print", ["fit", "--config", str(path), "--print_config"], line, config_file=path
    )


def test_a_local_tokenizer_s_ids_bound_the_vocab_size(tmp_path):
    """A tokenizer folder's ``tokenizer.json`` (its largest id + 1) is read without transformers."""
    folder = tmp_path / "tok"
    folder.mkdir()
    vocab = {chr(97 + i): i for i in range(20)}
    added = [{"id": 20, "content": "<eos>"}]
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}, "added_tokens": added}))
    config = yaml.safe_load(yaml.safe_dump(TINY))
    backbone = config["model"]["init_args"]["backbone"]
    backbone["tokenizer"] = str(folder)
    backbone["config"]["vocab_size"] = 16
    line = (
        f"{CONFIG}.vocab_size=16 is below the tokenizer's 21 tokens (each token id needs an embedding row);"
        " leave vocab_size out to take the tokenizer's"
    )
    assert_config_refused_before_torch(tmp_path, config, line, name="my.yaml")


def test_the_bytes_tokenizer_size_declared_is_the_live_tokenizer_s():
    from lightning_fed.class_options import BYTES_TOKENIZER_SIZE
    from lightning_fed.modules.backbone import byte_tokenizer

    assert len(byte_tokenizer()) == BYTES_TOKENIZER_SIZE


def test_the_activation_names_read_from_source_are_act2fn_s():
    from transformers.activations import ACT2CLS

    from lightning_fed.transformers_configs import activation_names

    assert set(activation_names()) == set(ACT2CLS)
