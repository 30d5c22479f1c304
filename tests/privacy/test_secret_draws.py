"""Every secret draw is keyed by the whole secret (issue 40, item 1).

Before, each draw was ``torch.Generator().manual_seed(s)`` of a 63-bit seed ``s``, and torch's CPU
generator keeps only the low 32 bits of ``s``: two seeds equal there drew the same noise, so a
draw was one of ``2**32`` streams, brute-forced from the released state in minutes. The pairs
below are such collisions of the old derivation (found by a birthday search over
``derive_seed(i, tag...) mod 2**32``, ``i = 0, 1, ...``, ~10 s; each test asserts its pair still
collides there); under the new design they draw different noise and samples.
"""

import ast
import random
from pathlib import Path

import numpy as np
import pytest
import torch

import lightning_fed
from lightning_fed.federation.run_key_file import KEY_BYTES, RunSecret
from lightning_fed.federation.sampling import derive_seed, poisson_sample_clients, sample_clients
from lightning_fed.federation.secret_seed import GENERATOR_KEY_BITS, MATERIAL_BYTES, SecretSeed, standard_normal
from lightning_fed.privacy import ClientLevelDP
from lightning_fed.strategies import ClientUpdate, FedAvg

CLIENT_NOISE_TAGS = (0x44_50, 0)  # ClientLevelDP's noise of round 0 (client_dp._NOISE_TAG)
CLIENT_NOISE_PAIR = (30563, 111085)
DP_SGD_TAGS = (0x4450_5347, 0x4E54)  # DP-SGD's noise of a step outside a turn (dp_sgd._NOISE_TAG, _NO_TURN)
DP_SGD_PAIR = (68492, 100982)
SAMPLE_TAGS = (0x5053, 0)  # the Poisson sample of round 0 (sampling._POISSON_TAG)
SAMPLE_KEYS = (41255, 81379)  # RunSecret keys i.to_bytes(32): their 63-bit "client sampling" seeds collide


def _low32(seed, tags):
    """The 32 bits torch's CPU generator kept of the old design's seed."""
    return derive_seed(seed, *tags) % 2**32


def _old_seed(key: bytes, label: str) -> int:
    """The old ``RunSecret.seed``: 63 bits of ``HMAC-SHA256(key, label)``."""
    import hashlib
    import hmac

    return int.from_bytes(hmac.new(key, label.encode(), hashlib.sha256).digest()[:8], "big") >> 1


def _client_noise(seed):
    x = {"w": torch.zeros(64)}
    dp = ClientLevelDP(FedAvg(), noise_multiplier=1.0, clip_norm=1.0, expected_clients=1, seed=seed)
    dp.setup(x, 1)
    return dp.aggregate(x, [ClientUpdate(0, 1, {"w": torch.zeros(64)})])["w"]


def test_seeds_torch_would_have_merged_draw_different_client_level_noise():
    a, b = CLIENT_NOISE_PAIR
    assert _low32(a, CLIENT_NOISE_TAGS) == _low32(b, CLIENT_NOISE_TAGS)
    assert not torch.equal(_client_noise(a), _client_noise(b))
    torch.testing.assert_close(_client_noise(a), _client_noise(a), rtol=0, atol=0)  # reproducible


def _dp_sgd_noise(seed):
    from lightning_fed.datamodules.round_sampler import EMPTY_BATCH
    from lightning_fed.modules import BackboneConfig, LoraSettings
    from lightning_fed.privacy import DPSFTModule, DPSGDSettings
    from tests.helpers.runs import TINY_GPT2

    torch.manual_seed(0)
    settings = DPSGDSettings(clip_norm=0.5, noise_multiplier=2.0, expected_batch_size=4, seed=seed)
    module = DPSFTModule(
        BackboneConfig(config=dict(TINY_GPT2), tokenizer="bytes"), lora=LoraSettings(r=2), dp_sgd=settings
    )
    module.training_step({EMPTY_BATCH: torch.zeros(0, dtype=torch.long)}, 0).backward()
    module.on_after_backward()  # an empty batch's step: the noise alone
    return torch.cat([p.grad.flatten() for p in module.parameters() if p.requires_grad])


def test_seeds_torch_would_have_merged_draw_different_dp_sgd_noise():
    a, b = DP_SGD_PAIR
    assert _low32(a, DP_SGD_TAGS) == _low32(b, DP_SGD_TAGS)
    assert not torch.equal(_dp_sgd_noise(a), _dp_sgd_noise(b))


def test_run_keys_torch_would_have_merged_draw_different_samples():
    keys = [i.to_bytes(KEY_BYTES, "big") for i in SAMPLE_KEYS]
    assert len({_low32(_old_seed(k, "client sampling"), SAMPLE_TAGS) for k in keys}) == 1
    seeds = [RunSecret(k).seed("client sampling") for k in keys]
    assert poisson_sample_clients(128, 0.5, seeds[0], 0) != poisson_sample_clients(128, 0.5, seeds[1], 0)
    assert sample_clients(128, 64, seeds[0], 0) != sample_clients(128, 64, seeds[1], 0)


@pytest.mark.parametrize("low_bytes", [4, 8])
def test_keys_equal_in_their_low_32_or_64_bits_draw_differently(low_bytes):
    """Two run keys (and two secret seeds) that share their low 32 / 64 bits draw other noise."""
    rng = random.Random(low_bytes)
    a = bytes(rng.randrange(256) for _ in range(KEY_BYTES))
    b = bytes(rng.randrange(256) for _ in range(KEY_BYTES - low_bytes)) + a[-low_bytes:]
    assert a != b and int.from_bytes(a, "big") % 2 ** (8 * low_bytes) == int.from_bytes(b, "big") % 2 ** (8 * low_bytes)
    for seed_a, seed_b in [(RunSecret(a).seed("client-level noise"), RunSecret(b).seed("client-level noise"))] + [
        (SecretSeed(a), SecretSeed(b))
    ]:
        draw_a = standard_normal((256,), seed_a.generator("noise", 0))
        draw_b = standard_normal((256,), seed_b.generator("noise", 0))
        assert not torch.equal(draw_a, draw_b)


def test_each_draw_depends_on_every_bit_of_the_secret():
    """Flipping any one of the 256 bits of the material changes the draw's stream; the generator's
    own key is 128 bits (Philox4x64-10), so guessing a stream is >= 2**128 tries."""
    assert GENERATOR_KEY_BITS >= 128 and MATERIAL_BYTES * 8 == KEY_BYTES * 8 == 256
    base = bytes(range(MATERIAL_BYTES))
    first = SecretSeed(base).generator("x", 1).integers(0, 2**63, size=4).tolist()
    for bit in range(8 * MATERIAL_BYTES):
        flipped = bytearray(base)
        flipped[bit // 8] ^= 1 << (bit % 8)
        assert SecretSeed(bytes(flipped)).generator("x", 1).integers(0, 2**63, size=4).tolist() != first, bit
    labels = [("x", 1), ("x", 2), ("y", 1), ("x/1",), ("x", "1")]
    streams = {tuple(SecretSeed(base).generator(*label).integers(0, 2**63, size=2).tolist()) for label in labels}
    assert len(streams) == len(labels)


SHRUNK_BITS = 14


def test_attacker_recovers_the_noise_of_a_shrunk_key_space_from_the_released_state():
    """The negative control: a run key drawn from only 2**14 values (a broken key source). An
    attacker with the released state (previous and new global model) and the config tries every
    key: the right one leaves a remainder ``m * (x' - x) - noise`` of norm <= m C (the clipped sum),
    a wrong one of norm ~ sqrt(2 d) z C (d = 128: ~16 against m C = 4; a false hit has chi-square
    probability < 1e-30 per key). It finds the key and the clipped sum exactly.

    Measured here: ~0.2 ms a key (one HMAC, one Philox key schedule, 128 normals), so 2**14 keys take
    seconds; the real key space is 2**256 and each draw's stream 2**128 at the least: 2**114 times
    2**14 keys, ~1e27 years at this rate.
    """
    d, m, clip = 128, 4, 1.0
    true_key = random.Random(40).randrange(2**SHRUNK_BITS).to_bytes(KEY_BYTES, "big")
    x = {"w": torch.zeros(d)}
    dp = ClientLevelDP(FedAvg(), noise_multiplier=1.0, clip_norm=clip, expected_clients=m)
    dp.setup(x, 8)
    dp.seed = RunSecret(true_key).seed("client-level noise")  # as RunPrivacy seeds it from the run's key
    g = torch.Generator().manual_seed(1)
    updates = [ClientUpdate(c, 1, {"w": torch.randn(d, generator=g) * 0.05}) for c in range(m)]
    released = dp.aggregate(x, updates)["w"]
    clipped_sum = sum(u.state["w"] for u in updates)  # each norm 0.05 * sqrt(128) = 0.57 < C: unclipped

    observed = m * (released - x["w"])  # = clipped sum + noise
    hits = []
    for k in range(2**SHRUNK_BITS):
        seed = RunSecret(k.to_bytes(KEY_BYTES, "big")).seed("client-level noise")
        noise = standard_normal((d,), seed.generator("client-level noise", *CLIENT_NOISE_TAGS)) * clip
        if float((observed - noise).norm()) <= m * clip:
            hits.append((k, noise))
    assert [k for k, _ in hits] == [int.from_bytes(true_key, "big")]
    # float32 rounding of x + (S + n) / m and back: |error| <= a few ulp of |S + n| ~ 4, i.e. < 1e-5
    torch.testing.assert_close(observed - hits[0][1], clipped_sum, rtol=0, atol=1e-5)


def test_a_secret_seed_cannot_seed_an_integer_generator():
    seed = SecretSeed.fresh()
    for use in (
        lambda: torch.Generator().manual_seed(seed),
        lambda: torch.manual_seed(seed),
        lambda: derive_seed(seed, 1),
        lambda: np.random.seed(seed),
        lambda: np.random.default_rng(seed),
        lambda: int(seed),
    ):
        with pytest.raises((TypeError, RuntimeError)):
            use()


def test_the_package_hands_out_secret_seeds_only():
    from lightning_fed.modules import BackboneConfig
    from lightning_fed.privacy import DPSFTModule, DPSGDSettings
    from lightning_fed.privacy.selector_noise import selector_noise_seed
    from tests.helpers.runs import TINY_GPT2

    settings = DPSGDSettings(noise_multiplier=1.0)
    module = DPSFTModule(BackboneConfig(config=dict(TINY_GPT2), tokenizer="bytes"), dp_sgd=settings)
    for seed in (
        ClientLevelDP(FedAvg()).seed,
        module.noise_seed,
        module.poisson_batch_seed(0),
        selector_noise_seed(None, 0, 0),
        RunSecret.fresh().seed("client sampling"),
    ):
        assert isinstance(seed, SecretSeed)


SECRET_NAMES = ("noise_seed", "sampling_seed", "poisson_seed", "batch_seed", "secret", "dp.seed")
INTEGER_SEEDING = ("manual_seed", "random.seed", "default_rng", "RandomState", "derive_seed", "randbits")


def test_no_secret_draw_goes_through_an_integer_seed():
    """No call in the package seeds an integer generator (torch ``manual_seed``, ``np.random.seed``,
    ``default_rng``, ``derive_seed``) from a secret's name, and the privacy package seeds none at
    all (``secrets.randbits``, a short secret, included)."""
    root = Path(lightning_fed.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        private = path.parent.name == "privacy"
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            if not ast.unparse(node.func).endswith(INTEGER_SEEDING):
                continue
            args = " ".join(ast.unparse(a) for a in [*node.args, *(k.value for k in node.keywords)])
            if private or any(s in args for s in SECRET_NAMES):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    assert not found
