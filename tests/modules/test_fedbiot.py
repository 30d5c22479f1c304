"""OffsiteModule (FedBiOT / FedOT client side): what a client receives, Eq. (1), evaluation, bytes."""

import json

import pytest
import torch

from lightning_fed.modules import BackboneConfig, OffsiteModule, adapter_proximal_term
from lightning_fed.strategies import FedProx
from tests.helpers.offsite import offsite_module, one_thread, run_method  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_thread")


def _numel(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize(("layout", "stack"), [("fedbiot", [0, 2, 5, 6, 7]), ("offsite", [0, 1, 2, 5, 6, 7])])
def test_client_receives_embeddings_emulator_adapter_head_only(layout, stack):
    module = offsite_module(layout, beta=0.5, adapter_layers=2)
    full = module.non_compressed  # E*: the server's, never sent
    block = _numel(full[0])  # every GPT-2 block has the same size
    received = module.client_state()
    embeddings = received["transformer.wte.weight"].numel() + received["transformer.wpe.weight"].numel()
    final_norm = received["transformer.ln_f.weight"].numel() + received["transformer.ln_f.bias"].numel()
    # the head is tied to wte, so it adds no parameters of its own
    assert sum(t.numel() for t in received.values()) == embeddings + final_norm + len(stack) * block
    layer_ids = sorted({int(k.split(".")[2]) for k in received if k.startswith("transformer.h.")})
    assert layer_ids == list(range(len(stack)))
    assert {k.split(".")[1] for k in received if not k.startswith("transformer.h.")} <= {"wte", "wpe", "ln_f"}
    # no tensor a client receives shares storage with E*
    e_star = {p.data_ptr() for p in full.parameters()}
    assert not any(t.data_ptr() in e_star for t in received.values())
    # the emulator starts as copies of the kept layers; AdapFu runs all 8 original layers
    nb = len(module.layout.adapter_bottom)
    for pos, src in enumerate(module.layout.emulator):
        copy_ = module.model.transformer.h[nb + pos]
        original = full[module.layout.non_compressed.index(src)]
        assert all(torch.equal(a, b) for a, b in zip(copy_.parameters(), original.parameters()))
    shared = module.shared_parameters()
    assert sum(p.numel() for p in shared.values()) == len(module.layout.adapter) * block
    assert module.full_model_nbytes() == 4 * (embeddings + final_norm + 8 * block)


def test_adapfu_runs_the_full_model():
    module = offsite_module("fedbiot", beta=0.5, adapter_layers=2).eval()
    batch = {"input_ids": torch.randint(0, 256, (2, 10)), "attention_mask": torch.ones(2, 10, dtype=torch.long)}
    with torch.no_grad():
        emu = module(batch)
        with module.composition("full"):
            assert len(module.model.transformer.h) == 8
            full = module(batch)
    assert len(module.model.transformer.h) == 5  # the client stack is back
    assert not torch.allclose(emu, full)


def test_proximal_term_hand_value():
    """Eq. (1): eps/2 ||w_A - w_A^t||^2; its gradient eps (w_A - w_A^t) is FedProx's correction."""
    w = torch.tensor([1.0, 2.0, -1.0], requires_grad=True)
    w_t = torch.tensor([0.0, 4.0, -1.0])
    eps = 0.5
    term = adapter_proximal_term({"a": w}, {"a": w_t}, eps)
    assert float(term) == pytest.approx(0.25 * (1.0 + 4.0 + 0.0))  # 0.5/2 * (1^2 + 2^2 + 0^2)
    term.backward()
    assert w.grad.tolist() == pytest.approx([0.5, -1.0, 0.0])  # factor eps, not eps/2
    param = torch.nn.Parameter(w.detach().clone())
    param.grad = torch.zeros(3)
    FedProx(mu=eps).local_correction({"a": w_t}, {}, {}).correct_gradients({"a": param})
    assert param.grad.tolist() == pytest.approx(w.grad.tolist())  # Alg. 1 line 11


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"adapter_layers": 8}, "adapter_layers (s) must be in [1, 7]"),
        ({"beta": 1.0}, "must be in [0, 1), got 1.0"),
        ({"layout": "middle"}, "model.layout must be one of"),
        ({"generation_metric": "bleu"}, "model.generation_metric must be None or one of"),
    ],
)
def test_bad_input_is_a_one_line_error(kwargs, message):
    with pytest.raises(ValueError) as err:
        offsite_module(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_unknown_architecture_is_named():
    opt = {
        "model_type": "opt",
        "num_hidden_layers": 2,
        "hidden_size": 16,
        "ffn_dim": 32,
        "num_attention_heads": 2,
        "word_embed_proj_dim": 16,
    }
    with pytest.raises(ValueError, match="unsupported architecture OPTForCausalLM") as err:
        OffsiteModule(BackboneConfig(config=opt, tokenizer="bytes"))
    assert "\n" not in str(err.value)


def test_llama_style_backbone():
    llama = {
        "model_type": "llama",
        "num_hidden_layers": 6,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
    }
    module = OffsiteModule(BackboneConfig(config=llama, tokenizer="bytes"), adapter_layers=2, beta=0.5)
    assert module.layout.emulator == (0, 3)  # E* = 0..3, n' = 2, stride 3
    assert all(
        k.startswith("model.model.layers.2.") or k.startswith("model.model.layers.3.")
        for k in module.shared_parameters()
    )
    batch = {
        "input_ids": torch.randint(0, 256, (2, 7)),
        "attention_mask": torch.ones(2, 7, dtype=torch.long),
        "labels": torch.randint(0, 256, (2, 7)),
    }
    out = module.validation_step(batch, 0)
    assert set(out) >= {"adapemu_loss", "adapfu_loss", "adapemu_ppl", "adapfu_ppl"}


def test_generation_metric_scores_both_compositions():
    module = offsite_module("fedbiot", beta=0.5, adapter_layers=2, generation_metric="exact_match", max_new_tokens=3)
    tok = module.tokenizer
    prompt, answer = tok("Count: a b c\n")["input_ids"], tok("3")["input_ids"] + [tok.eos_token_id]
    batch = {
        "input_ids": torch.tensor([prompt + answer]),
        "attention_mask": torch.ones(1, len(prompt + answer), dtype=torch.long),
        "labels": torch.tensor([[-100] * len(prompt) + answer]),
    }
    out = module.eval().validation_step(batch, 0)
    assert out["adapemu_exact_match"].shape == (1,) and out["adapfu_exact_match"].item() in (0.0, 1.0)


@pytest.mark.parametrize("method", ["fedbiot", "fedot"])
def test_bytes_each_client_receives_are_in_the_summary(tmp_path, method):
    short = {
        "local_steps": 1,
        "distill_steps": 2,
        "steps_per_round": 1,
        "num_sanity_val_steps": 0,
        "limit_val_batches": 1,
    }
    loop, hook, module = run_method(method, str(tmp_path), rounds=3, **short)
    offsite = json.loads((tmp_path / "summary.json").read_text())["hooks"]["EmulatorAlignment"]
    adapter, emulator, frozen = offsite["adapter_bytes"], offsite["emulator_bytes"], offsite["frozen_bytes"]
    assert adapter == 4 * sum(p.numel() for p in module.shared_parameters().values())
    assert emulator == 4 * sum(p.numel() for p in module.emulator_parameters().values())
    assert adapter + emulator + frozen == offsite["client_model_bytes"] < offsite["full_model_bytes"]
    seen = set()
    for record, round_ in zip(offsite["received_per_round"], loop.server.report.history):
        expected = {}
        for cid in map(str, round_["clients"]):
            # FedBiOT re-sends the emulator every round (it is re-aligned); FedOT only once
            resend = method == "fedbiot" or cid not in seen
            expected[cid] = adapter + (emulator if resend else 0) + (frozen if cid not in seen else 0)
            seen.add(cid)
        assert record["bytes"] == expected
        # the loop's downlink counts the same bytes (adapter by the loop, the rest by the hook)
        assert round_["down_bytes"] == sum(expected.values())
    assert all(b < offsite["full_model_bytes"] for r in offsite["received_per_round"] for b in r["bytes"].values())
    summary = loop.server.report.history[-1]["val"]
    assert {"adapemu_loss", "adapfu_loss", "adapemu_ppl", "adapfu_token_acc"} <= set(summary)


@pytest.fixture(scope="module")
def fedbiot_vs_fedot(tmp_path_factory):
    """FedBiOT and FedOT on the same planted data, model, budget and seed: (initial, final) val."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    results = {}
    try:
        for method in ("fedbiot", "fedot"):
            loop, _, _ = run_method(method, str(tmp_path_factory.mktemp(method)), rounds=3, num_sanity_val_steps=-1)
            results[method] = (loop.server.report.initial_eval["val"], loop.server.report.history[-1]["val"])
    finally:
        torch.set_num_threads(threads)
    return results


def test_fedbiot_and_fedot_learn_the_planted_tasks(fedbiot_vs_fedot):
    # Measured (seed 0): AdapFu loss 5.64 -> 5.14 (FedBiOT), 5.64 -> 5.12 (FedOT).
    for method, (initial, final) in fedbiot_vs_fedot.items():
        assert final["adapfu_loss"] < 0.95 * initial["adapfu_loss"], method
        assert final["adapemu_loss"] < 0.95 * initial["adapemu_loss"], method


@pytest.mark.xfail(
    strict=True,
    reason=(
        "Does not reproduce on this tiny byte-level model (final AdapFu loss FedBiOT 5.136, FedOT 5.117); on "
        "pre-trained SmolLM2-135M it shows, but only by 0.15 nats/token on average and not on every seed, at ~1 min "
        "per run: see 'FedBiOT vs FedOT on SmolLM2-135M' in benchmarks/RESULTS.md (benchmarks/fedbiot_bench.py)."
    ),
)
def test_fedbiot_adapfu_beats_fedot_adapfu_on_planted_data(fedbiot_vs_fedot):
    """The paper's direction (Sec. 4, Tables 1-3): FedBiOT's AdapFu is better than FedOT's."""
    (_, fedbiot), (_, fedot) = fedbiot_vs_fedot["fedbiot"], fedbiot_vs_fedot["fedot"]
    assert fedbiot["adapfu_loss"] < fedot["adapfu_loss"], (fedbiot, fedot)
