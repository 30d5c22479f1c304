"""Secret draws keyed by all of a secret's bits (issue 40, item 1).

A private run's noise, client sample and DP-SGD batches must be as hard to regenerate as its
256-bit key. A seed squeezed into an integer for ``torch.Generator().manual_seed`` is not: torch's
CPU generator (a Mersenne Twister) keeps only the low 32 bits of its seed, so a draw seeded that
way is one of ``2**32`` streams, and the released state checks a guess (the right stream leaves a
remainder of norm ``<= m C``): a brute force of minutes on one core.

:class:`SecretSeed` is 256 bits of key material that is **not an integer**: no ``__int__``,
no ``__index__``, so it cannot reach ``manual_seed``, ``derive_seed`` or ``np.random.seed`` by
accident (they raise). Every secret draw goes through :meth:`SecretSeed.generator`:

* the draw's label (purpose, round, client, step) and the material go through
  ``HMAC-SHA256`` (the standard library's PRF), so each draw gets 256 fresh bits that reveal
  nothing of the key or of any other draw;
* those 256 bits are the whole state of numpy's counter-based Philox4x64-10 generator: its
  128-bit key and the upper half of its 256-bit counter. A guess at a draw's stream is a guess at
  128 bits at the least (``2**128`` tries), against ``2**32`` for the torch generator.

A draw depends only on (material, label): a resumed run with its key repeats the uninterrupted
run exactly, and a test run that fixes a noise seed in its config (:meth:`SecretSeed.of_int`,
public, not private) is reproducible. Normal noise is drawn as float32 (float64 where the target
is float64) with numpy and wrapped with ``torch.from_numpy`` (:func:`standard_normal`).

The API here is stable: :class:`SecretSeed` (``fresh``, ``of_int``, ``child``, ``generator``,
``fingerprint``), :func:`as_secret_seed` and :func:`standard_normal`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

MATERIAL_BYTES = 32
"""A secret seed's material: 256 bits."""

GENERATOR_KEY_BITS = 128
"""Bits of a draw's generator state an attacker must guess at the least (Philox's key)."""

Label = int | str


def _message(label: Sequence[Label]) -> bytes:
    """An unambiguous encoding of a draw's label (``("a/b",)`` and ``("a", "b")`` differ)."""
    parts = []
    for part in label:
        if isinstance(part, bool) or not isinstance(part, (int, str, np.integer)):
            raise TypeError(f"a secret draw's label is made of ints and strings, got {part!r}")
        text = f"i{int(part)}" if not isinstance(part, str) else f"s{part}"
        data = text.encode()
        parts.append(len(data).to_bytes(4, "big") + data)
    return b"".join(parts)


class SecretSeed:
    """256 bits naming a family of secret draws; a draw is :meth:`generator` of its label.

    Not an integer (so ``torch.Generator().manual_seed(s)`` raises), its ``repr`` never shows the
    material, and two are equal when their material is (compared in constant time).
    """

    __slots__ = ("_material",)

    def __init__(self, material: bytes) -> None:
        if not isinstance(material, bytes) or len(material) != MATERIAL_BYTES:
            raise ValueError(f"a secret seed is {MATERIAL_BYTES} bytes of material")
        self._material = material

    @classmethod
    def fresh(cls) -> SecretSeed:
        """A new secret seed from the operating system's CSPRNG."""
        return cls(secrets.token_bytes(MATERIAL_BYTES))

    @classmethod
    def of_int(cls, seed: int) -> SecretSeed:
        """The seed of a test run that fixed an integer seed in its config: public (anyone with the
        config regenerates its draws), reproducible."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"a seed is an integer, got {seed!r}")
        return cls(hashlib.sha256(f"lightning-fed public seed/{int(seed)}".encode()).digest())

    def child(self, *label: Label) -> SecretSeed:
        """The secret seed of the draws named ``label`` (``HMAC-SHA256(material, label)``)."""
        return SecretSeed(hmac.new(self._material, _message(label), hashlib.sha256).digest())

    def generator(self, *label: Label) -> np.random.Generator:
        """The generator of the draw named ``label``: Philox4x64-10 whose key (128 bits) and
        counter's upper half (128 bits) are ``HMAC-SHA256(material, label)``."""
        digest = hmac.new(self._material, _message(label), hashlib.sha256).digest()
        key = int.from_bytes(digest[:16], "big")
        counter = int.from_bytes(digest[16:], "big") << 128  # the low half counts the draws
        return np.random.Generator(np.random.Philox(key=key, counter=counter))

    def fingerprint(self, purpose: str = "fingerprint") -> str:
        """16 hex digits that tell two seeds apart without revealing either (a PRF output)."""
        return self.child("lightning-fed", purpose)._material[:8].hex()

    def __repr__(self) -> str:
        return "SecretSeed(<secret>)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretSeed) and hmac.compare_digest(self._material, other._material)

    def __hash__(self) -> int:
        return hash(self.child("hash")._material)

    def __reduce__(self) -> tuple[Any, ...]:  # pickled to a Flower client's process
        return (SecretSeed, (self._material,))


def as_secret_seed(seed: SecretSeed | int) -> SecretSeed:
    """``seed`` itself, or the public :meth:`SecretSeed.of_int` of an integer a test fixed."""
    return seed if isinstance(seed, SecretSeed) else SecretSeed.of_int(seed)


def standard_normal(
    shape: Sequence[int] | torch.Size,
    generator: np.random.Generator | torch.Generator | None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """``N(0, 1)`` of ``shape`` on the CPU: from a secret draw's numpy ``generator`` (float64 when
    ``dtype`` is, else float32, then cast), or ``torch.randn`` of a torch one (public draws)."""
    if isinstance(generator, np.random.Generator):
        wide = dtype == torch.float64
        values = generator.standard_normal(tuple(shape), dtype=np.float64 if wide else np.float32)
        return torch.from_numpy(np.ascontiguousarray(values)).to(dtype)
    return torch.randn(tuple(shape), generator=generator, dtype=dtype)


def uniform(n: int, generator: np.random.Generator) -> Tensor:
    """``n`` uniforms in ``[0, 1)`` (float64) of a secret draw."""
    return torch.from_numpy(generator.random(int(n)))


def permutation(n: int, generator: np.random.Generator) -> Tensor:
    """A uniform permutation of ``range(n)`` (int64) of a secret draw."""
    return torch.from_numpy(generator.permutation(int(n)).astype(np.int64))
