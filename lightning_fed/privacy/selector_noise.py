"""FedBiscuit's selector losses as a Gaussian mechanism on the client (issue 24, "every channel counted").

On a grouping round every client reports the mean validation loss of each of the U selectors
(Wu et al., 2024, arXiv:2407.03038, Sec. 3.2, Step 2.1); the server clusters clients by these
rows. In a private run the row leaves the client only as

    l~ = clip(l, 0, L) + N(0, sigma^2 I_U),   sigma = z_s * L * sqrt(U):

each of the U coordinates lies in ``[0, L]``, so replacing a client's whole data moves the row by
at most ``L * sqrt(U)`` in L2 norm (every coordinate by ``L``), and ``sigma`` is ``z_s`` times
that sensitivity: the Gaussian mechanism with noise multiplier ``z_s`` at the client level.

Every client answers every grouping round (no sampling, rate 1), so ``G`` groupings compose to
the Gaussian mechanism with multiplier ``z_s`` taken ``G`` times:
``PrivacyAccountant(z_s, 1.0, delta)`` with ``G`` steps (Opacus). The update channel and this
one protect the same unit (a client's whole data), so their composition is one client-level
figure: :func:`~lightning_fed.privacy.accountant.composed_epsilon`.

The noise is drawn on the client from a fresh 256-bit secret seed from the OS (secret: whoever
knows it can subtract the noise; :class:`~lightning_fed.federation.secret_seed.SecretSeed`),
unless the run's ``ClientLevelDP`` was given a ``seed`` (tests): then from ``(seed, round,
client)``, so an in-process and a Flower run draw the same noise.
"""

from __future__ import annotations

import math

from torch import Tensor

from lightning_fed.federation.secret_seed import SecretSeed, as_secret_seed, standard_normal

#: ``L`` by default: the selector's pair loss is a two-way cross-entropy (``selector_loss``), ``ln 2 = 0.69``
#: at chance, so ``[0, 1]`` keeps apart every selector that does better than chance (and a little worse).
DEFAULT_CLIP = 1.0

#: ``z_s`` by default when only example-level DP-SGD is on (with ``ClientLevelDP`` the run's ``z``).
DEFAULT_NOISE_MULTIPLIER = 1.0

#: Separates the selector noise seeds from the sampler's and ClientLevelDP's.
SELECTOR_NOISE_TAG = 0x53_4C


def selector_noise_std(noise_multiplier: float, clip: float, num_selectors: int) -> float:
    """``sigma = z_s * L * sqrt(U)``: ``z_s`` times the L2 sensitivity of a row of U losses in ``[0, L]``."""
    if not noise_multiplier > 0 or not clip > 0 or num_selectors < 1:
        raise ValueError(
            f"the selector-loss noise needs noise_multiplier > 0, clip > 0 and num_selectors >= 1, got"
            f" {noise_multiplier!r}, {clip!r}, {num_selectors!r}"
        )
    return float(noise_multiplier) * float(clip) * math.sqrt(num_selectors)


def selector_noise_seed(seed: int | None, round_idx: int, client_id: int) -> SecretSeed:
    """The noise seed of ``client_id`` in round ``round_idx``: from ``(seed, round, client)`` when
    the run's ``ClientLevelDP`` has a given seed, else a fresh secret one from the OS."""
    if seed is None:
        return SecretSeed.fresh()
    return SecretSeed.of_int(int(seed)).child("selector noise", SELECTOR_NOISE_TAG, int(round_idx), int(client_id))


def noised_selector_losses(losses: Tensor, clip: float, std: float, seed: SecretSeed | int) -> Tensor:
    """``clip(losses, 0, L) + N(0, std^2)`` per coordinate, the noise drawn from ``seed``."""
    clipped = losses.float().clamp(0.0, float(clip))
    return clipped + standard_normal(clipped.shape, as_secret_seed(seed).generator("selector noise")) * float(std)
