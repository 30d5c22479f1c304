"""The tiny Llama config the planner's tests size (hidden 8, 2 layers, grouped-query attention)."""

TINY_LLAMA = {
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "vocab_size": 10,
    "tie_word_embeddings": False,
}
TINY = {"model_type": "llama", **TINY_LLAMA}
"""As a ``model.backbone.config`` (with its ``model_type``)."""
TINY_RUNNABLE = {**TINY, "vocab_size": 259}
"""TINY with a row for each of the ``bytes`` tokenizer's 259 ids, for a config the CLI's precheck reads
(``plan``/``fit`` refuse ``vocab_size: 10`` below the tokenizer's ids: lightning_fed/class_options.py)."""
