"""The DPO family's losses chosen by name (``model.init_args.loss``; issue 42 item 5)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from lightning_fed.modules import BackboneConfig, DPOModule, LoraSettings
from lightning_fed.modules.dpo_losses import DPO_LOSSES, find_dpo_loss
from lightning_fed.modules.losses import dpo_loss

# One pair: policy log-probs -1 (chosen), -3 (rejected); reference -2, -2: h = 1 - (-1) = 2.
LOGPS = (torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]), torch.tensor([-2.0]))
BETA = 0.5


def _softplus(x: float) -> float:
    return math.log1p(math.exp(x))


@pytest.mark.parametrize(
    ("name", "options", "expected"),
    [
        ("sigmoid", {}, _softplus(-BETA * 2)),  # -log sigmoid(beta h)
        ("ipo", {}, (2 - 1 / (2 * BETA)) ** 2),  # (h - 1/(2 beta))^2
        ("hinge", {}, max(0.0, 1 - BETA * 2)),  # relu(1 - beta h)
        ("conservative", {"label_smoothing": 0.25}, 0.75 * _softplus(-1.0) + 0.25 * _softplus(1.0)),
    ],
)
def test_each_loss_by_hand(name, options, expected):
    losses, chosen, rejected = find_dpo_loss(name, options)(*LOGPS, BETA, **options)
    assert losses.item() == pytest.approx(expected, rel=1e-6)
    assert (chosen.item(), rejected.item()) == (BETA * 1.0, BETA * -1.0)  # beta (log pi - log ref)


def test_sigmoid_is_dpo_and_conservative_without_smoothing_too():
    want = dpo_loss(*LOGPS, BETA)[0]
    assert torch.equal(DPO_LOSSES["sigmoid"](*LOGPS, BETA)[0], want)
    torch.testing.assert_close(DPO_LOSSES["conservative"](*LOGPS, BETA, label_smoothing=0.0)[0], want)


def _module(**kwargs) -> DPOModule:
    return DPOModule(
        BackboneConfig(config={"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2}, tokenizer="bytes"),
        lora=LoraSettings(r=2, dropout=0.0),
        beta=BETA,
        **kwargs,
    )


def test_the_module_uses_the_named_loss():
    module = _module(loss="ipo")
    assert module.loss_fn is DPO_LOSSES["ipo"]
    assert _module().loss_fn is DPO_LOSSES["sigmoid"]


def test_a_dotted_path_names_a_function_outside_the_package():
    assert find_dpo_loss("lightning_fed.modules.losses.dpo_loss") is dpo_loss


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("nope", None, "model.loss must be one of ['conservative', 'hinge', 'ipo', 'sigmoid'] or a dotted path"),
        ("no_such.module.fn", None, "model.loss: cannot import 'no_such.module.fn'"),
        (
            "conservative",
            {"smoothing": 0.1},
            "model.loss_options: 'conservative' takes ['label_smoothing'], got ['smoothing']",
        ),
    ],
)
def test_bad_names_and_options_are_named(name, options, message):
    with pytest.raises(ValueError, match="^" + __import__("re").escape(message)):
        find_dpo_loss(name, options)


def test_the_cli_refuses_an_unknown_loss_in_one_line(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lightning_fed.cli",
            "fit",
            "--config",
            "tiny",
            "--model.init_args.loss=nope",
            f"--trainer.default_root_dir={tmp_path}/run",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2  # a bad option
    assert proc.stderr.splitlines() == [
        "error: model.loss must be one of ['conservative', 'hinge', 'ipo', 'sigmoid'] or a dotted path to a"
        " function, got 'nope'",
    ]  # before torch (class_options.py): one line, no --debug hint
