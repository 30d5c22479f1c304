"""Adapter folders handed over as ``selector.path``: every problem is one line naming the file
(issue 22, item 5: a missing ``r`` said ``KeyError: r``, wrong shapes / a truncated file / a huge
``r`` failed unnamed, NaN weights were used)."""

from __future__ import annotations

import json
import re

import pytest
import torch
from safetensors.torch import load_file, save_file

from lightning_fed.modules.backbone import BackboneConfig
from lightning_fed.modules.lora import LoraSettings
from lightning_fed.modules.selector import BinarySelectorModule
from lightning_fed.modules.selector_source import load_selector
from tests.helpers.runs import TINY_GPT2

BACKBONE = BackboneConfig(config=dict(TINY_GPT2), tokenizer="bytes")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("selector") / "adapter"
    BinarySelectorModule(BACKBONE, lora=LoraSettings(r=4, alpha=8, dropout=0.0)).save_adapter(folder)
    return folder


def _copy(saved, tmp_path, config=None, weights=None, raw=None):
    folder = tmp_path / "adapter"
    folder.mkdir()
    cfg = json.loads((saved / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**cfg, **(config or {})}))
    tensors = load_file(str(saved / "adapter_model.safetensors"))
    if weights is not None:
        tensors = weights(tensors)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    if raw is not None:
        (folder / "adapter_model.safetensors").write_bytes(raw((folder / "adapter_model.safetensors").read_bytes()))
    return folder


def _first_a(tensors):
    return next(k for k in tensors if ".lora_A." in k)


def _set(key_of, make):
    def change(tensors):
        tensors[key_of(tensors)] = make(tensors[key_of(tensors)])
        return tensors

    return change


CASES = {
    "no_r": ({"r": None}, None, None, "adapter_config.json': 'r' must be a positive integer, got None"),
    "r_text": ({"r": "four"}, None, None, "adapter_config.json': 'r' must be a positive integer, got 'four'"),
    "huge_r": ({"r": 100_000_000}, None, None, "has shape (4, 32), which is not rank r=100000000 of adapter_config"),
    "wrong_shape": (
        None,
        _set(_first_a, lambda t: torch.zeros(4, 7)),
        None,
        "has shape (4, 7), the model's is (4, 32)",
    ),
    "nan": (None, _set(_first_a, lambda t: torch.full_like(t, float("nan"))), None, "has NaN or infinite values"),
    "int": (None, _set(_first_a, lambda t: t.long()), None, "is int64, expected floating point weights"),
    "extra_key": (
        None,
        lambda t: {**t, "base_model.model.lm_head.lora_A.weight": torch.zeros(4, 32)},
        None,
        "'base_model.model.lm_head.lora_A.weight' is not a weight of this model's adapter",
    ),
    "truncated": (None, None, lambda b: b[: len(b) // 2], "not a complete safetensors file"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_selector_adapter_is_one_line_naming_the_file(saved, tmp_path, case):
    config, weights, raw, message = CASES[case]
    folder = _copy(saved, tmp_path, config, weights, raw)
    with pytest.raises(ValueError) as err:
        load_selector(str(folder), backbone=BACKBONE)
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"selector.path {str(folder)!r}".rstrip("'")), text
    assert re.search(re.escape(message), text), text


def test_a_good_adapter_still_loads(saved, tmp_path):
    folder = _copy(saved, tmp_path)
    selector = load_selector(str(folder), backbone=BACKBONE)
    got = {k: v for k, v in selector.state_dict().items() if "lora_A" in k}
    assert got and all(torch.isfinite(v).all() for v in got.values())
