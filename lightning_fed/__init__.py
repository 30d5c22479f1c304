"""lightning-fed: federated fine-tuning and alignment of language models on PyTorch Lightning."""

from lightning_fed.console import silence_kernels_hub_notice

# Before PEFT imports bitsandbytes anywhere in the package (see lightning_fed/console.py).
silence_kernels_hub_notice()

__version__ = "0.1.0"
