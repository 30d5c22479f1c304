"""End-to-end one-run audit: canaries through the objects a private run builds, scored on what an
adversary really sees (issue 40, item 5).

``benchmarks/mechanism_audit.py`` runs the package's mechanisms on canaries, but it calls them
itself (its own sampler seed, its own noise multiplier, its own strategy): a copy of the package
broken anywhere else (clipping off, the sample from the config's seed, a weak key, DP-SGD's noise
cut inside the module) passes it. Here nothing of the mechanism is the auditor's:

* **Client level** (:func:`client_level_run`): the shipped config (``feddpo_dp``, ``secagg``) is
  parsed by the CLI's own parser (:func:`lightning_fed.run_parser.parse_run`, a tiny backbone in
  place of the GGUF one: the backbone never enters the server's half), and each federation is the
  run's own :func:`~lightning_fed.run_factory.server_round`: its
  :class:`~lightning_fed.privacy.RunPrivacy` plans ``z`` from the budget and draws the run's secret,
  the server samples the round's clients from it, admits each update (``send``/``receive``) and
  ``close``\\ s the round through the configured strategy (``ClientLevelDP`` with its adaptive clip
  around ``FedAdam``; SecAgg+'s simulated secure sum around it for ``secagg``). Client ``i`` of a
  federation of ``N`` (the config's ``num_clients``) is canary ``i``: when its coin says "in" its
  update is ``B e_i`` (``B`` = 100 times the initial clip: clipping matters), when "out" it is
  ``B e_N``, a coordinate no canary owns (every sampled update is then clipped alike, so the
  adaptive clip's count does not depend on the coins). The auditor records the global state each
  round releases (what ``close`` loads into the module) and scores canary ``i`` on coordinate ``i``.
  The adversary does not know whether the package is broken: it always runs its attack.

  - ``final_model`` (whoever gets the model): first the key search (:func:`recover_key`: every key
    of a shrunk space of ``2^key_bits``, the constant key included, tried on the state released after
    round 1); with a key found, ``|w_T - replay_T|`` (the run replayed with every canary out), else
    ``w_T - w_0``;
  - ``every_round`` (a party that sees every round's state, e.g. a client sampled in consecutive
    rounds): ``FedAdam``'s momentum is peeled off with the public ``beta_1``,
    ``s_t = (w_{t+1} - w_t) - beta_1 (w_t - w_{t-1})`` (the round's noised mean up to Adam's slowly
    moving scale), and the sample is recomputed from the config's seed (:func:`_known_sample_score`:
    against a secret sample that guess is wrong and the score is noise).

* **Example level** (:func:`example_level_run`): the shipped ``fedit_dpsgd``'s module
  (``DPSFTModule``, FFA-LoRA, parsed as above) privatizes the steps itself: per local step the
  Poisson batch is the package's :class:`~lightning_fed.datamodules.round_sampler.RoundBatchSampler`
  from the module's own :meth:`poisson_batch_seed`, the canaries' per-example gradients (``B e_i`` in
  the first trainable tensor) are handed to the module's ``on_after_backward`` as Opacus would, and
  the module clips, draws its noise (its own ``noise_multiplier_now`` and generator) and writes
  ``p.grad``. ``z`` is the module's calibrated one (``RunPrivacy.plan_example_budget``). The
  observation is the client's upload: under the config's plain SGD, ``-lr`` times the sum of the
  steps' gradients.

**Negative controls** are the package's own functions replaced by a broken version
(:func:`broken`, a monkeypatch, never a re-implementation of the mechanism):

* ``noise/10``: ``ClientLevelDP.set_noise_multiplier`` keeps a tenth of the planned ``z`` (the
  accountant keeps ``z``);
* ``clipping_off``: ``clip_to_norm`` where the mechanisms call it returns the vector unclipped;
* ``public_sample``: ``RunPrivacy.sampling_seed`` is ``None``, so the server samples from the
  config's ``seed``, which the ``every_round`` adversary recomputes (the package's
  :func:`poisson_sample_clients` and the seed the run resolves). Amplification only shows where it
  is large: this control runs at ``q = 0.01`` over 400 rounds;
* ``weak_key``: ``RunSecret.fresh`` draws its 32 bytes from a space of ``2^key_bits`` (``0``: a
  constant key), which the ``final_model`` adversary searches: a replica federation (the package's
  own round) with the candidate key releases noise alone, equal to the real release after round 1
  (the model of a 1-round run, or what every client of round 2 receives) on every coordinate whose
  sum was 0 (canaries out or not sampled);
* ``dp_sgd noise/10``: ``ExampleLevelDP.noise_multiplier_now`` returns a tenth (the module's
  budget, and so the reported epsilon, keep the calibrated ``z``).

A setting is **flagged** when the empirical epsilon (Steinke et al.'s one-run bound,
:mod:`audit_stats`) exceeds the epsilon the run itself reports (``privacy/epsilon``: the run's
accountant after its rounds; DP-SGD: the module's budget). See ``benchmarks/RESULTS.md``.

    OMP_NUM_THREADS=1 nice python benchmarks/run_audit.py --seeds 0 1 2 --out runs/run_audit.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import math
import secrets
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from audit_stats import largest_showable, one_run_audit  # noqa: E402  (a sibling file)

from lightning_fed import run_factory  # noqa: E402
from lightning_fed.datamodules.round_sampler import RoundBatchSampler  # noqa: E402
from lightning_fed.federation.run_key_file import KEY_BYTES  # noqa: E402
from lightning_fed.federation.sampling import poisson_sample_clients  # noqa: E402
from lightning_fed.federation.turn import TurnPlan  # noqa: E402
from lightning_fed.privacy import ClientLevelDP  # noqa: E402
from lightning_fed.privacy.client_dp import client_level_dp  # noqa: E402
from lightning_fed.privacy.dp_sgd import ExampleLevelDP  # noqa: E402
from lightning_fed.privacy.run import RunPrivacy  # noqa: E402
from lightning_fed.privacy.secret import RunKey, RunSecret  # noqa: E402
from lightning_fed.run_parser import parse_run  # noqa: E402
from lightning_fed.shipped_configs import resolve_config  # noqa: E402
from lightning_fed.strategies.base import ClientUpdate  # noqa: E402

TINY = {"config": {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 512}}
#: A canary's update (or gradient) in units of the initial clip norm: far beyond it, so that clipping matters.
BIG = 100.0
CANARIES = 2**15
CLIENT_VARIANTS = ("correct", "noise/10", "clipping_off", "public_sample", "weak_key")
EXAMPLE_VARIANTS = ("correct", "dp_sgd noise/10")
OBSERVATIONS = ("final_model", "every_round")


@dataclass(frozen=True)
class Setting:
    """One audited run: a shipped config (with overrides) and the audit's design.

    Args:
        name: What it audits.
        config: The shipped config's name.
        overrides: ``federation``/``data`` fields changed (a control's setting), e.g. ``{"rounds": 400}``.
        canaries: ``m``.
        guesses: Fractions of the canaries guessed "in" and "out" (fixed before the run).
        observation: ``final_model`` or ``every_round`` (module docstring).
        key_bits: ``weak_key``'s key space (``2^bits`` keys; each federation has its own key, so the
            attacker's search is ``2^bits`` replica rounds per federation).
    """

    name: str
    config: str
    overrides: dict = field(default_factory=dict)
    canaries: int = CANARIES
    guesses: tuple[float, float] = (0.25, 0.0)
    observation: str = "final_model"
    key_bits: int = 4


#: The shipped private configs, audited as shipped (the observation of whoever gets the final model,
#: and of a party seeing every round).
SHIPPED = {
    "feddpo_dp": Setting("feddpo_dp", "feddpo_dp"),
    "feddpo_dp every round": Setting("feddpo_dp every round", "feddpo_dp", observation="every_round"),
    # secagg reports 8.00: the guesses (0.48, 0.48) reach 8.2 (a perfect score gets them all right)
    "secagg": Setting("secagg", "secagg", guesses=(0.48, 0.48)),
    "fedit_dpsgd": Setting("fedit_dpsgd", "fedit_dpsgd", guesses=(0.48, 0.48)),
}
#: Each negative control: (its setting, the variant). Guesses fixed here, before any run.
CONTROLS = {
    "noise/10": (SHIPPED["feddpo_dp"], "noise/10"),
    "clipping_off": (SHIPPED["feddpo_dp"], "clipping_off"),
    "public_sample": (
        Setting(
            "feddpo_dp q=0.01, 400 rounds, N=512, budget 1.5",
            "feddpo_dp",
            {"sampling_rate": 0.01, "rounds": 400, "num_clients": 512, "privacy": {"target_epsilon": 1.5}},
            guesses=(1 / 16, 0.0),
            observation="every_round",
        ),
        "public_sample",
    ),
    "weak_key": (SHIPPED["feddpo_dp"], "weak_key"),
    "dp_sgd noise/10": (
        Setting("fedit_dpsgd 1 round, budget 2", "fedit_dpsgd", {"rounds": 1, "dp_sgd": {"target_epsilon": 2.0}}),
        "dp_sgd noise/10",
    ),
}


# ---------------------------------------------------------------------------------- the broken variants
def low_entropy_key(index: int) -> RunSecret:
    """The ``index``-th key of a shrunk key space: 32 bytes of which only the low ones vary."""
    return RunSecret(int(index).to_bytes(KEY_BYTES, "big"))


def install_key(privacy: RunPrivacy, secret: RunSecret, module: ExampleLevelDP | None = None) -> None:
    """Make ``secret`` the planned run's secret (of ``module``'s DP-SGD too), as a resume from its key
    file does: the one place this audit touches how the package keys its draws."""
    if module is not None:
        privacy._module = module
    privacy.key = RunKey(secret)
    privacy._apply_secret()


@contextlib.contextmanager
def broken(variant: str, key_bits: int = 20) -> Iterator[dict]:
    """The package with ``variant`` broken (``correct``: untouched); yields what the auditor is told
    of the breakage (nothing but the key space for ``weak_key``)."""
    import lightning_fed.deploy.secure_aggregation as secagg_module
    import lightning_fed.privacy.client_dp as client_dp_module

    undo: list[Callable[[], None]] = []

    def patch(owner, name, value):
        old = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        setattr(owner, name, value)
        undo.append(lambda: setattr(owner, name, old))

    known: dict = {}
    if variant == "noise/10":
        original = ClientLevelDP.set_noise_multiplier
        patch(ClientLevelDP, "set_noise_multiplier", lambda self, z: original(self, z / 10.0))
    elif variant == "clipping_off":

        def unclipped(tensors, clip_norm):
            out = {k: t.detach().to(torch.float64) for k, t in tensors.items()}
            return out, math.sqrt(sum(float(t.pow(2).sum()) for t in out.values()))

        for module in (client_dp_module, secagg_module):
            patch(module, "clip_to_norm", unclipped)
    elif variant == "public_sample":
        patch(RunPrivacy, "sampling_seed", property(lambda self: None))
    elif variant == "weak_key":
        patch(
            RunSecret, "fresh", classmethod(lambda cls: low_entropy_key(secrets.randbits(key_bits) if key_bits else 0))
        )
        known["key_bits"] = key_bits
    elif variant == "dp_sgd noise/10":
        original_z = ExampleLevelDP.noise_multiplier_now
        patch(ExampleLevelDP, "noise_multiplier_now", lambda self: original_z(self) / 10.0)
    elif variant != "correct":
        raise ValueError(f"unknown variant {variant!r}")
    try:
        yield known
    finally:
        for fn in reversed(undo):
            fn()


# ---------------------------------------------------------------------------------- the run's objects
_RDP: dict[tuple, object] = {}
_CALIBRATED: dict[tuple, float] = {}


@contextlib.contextmanager
def memoized_accounting() -> Iterator[None]:
    """Opacus' RDP of one step remembered across the audit's rounds and federations. Opacus computes
    ``steps`` steps as ``steps`` times one step's RDP (``analysis.rdp.compute_rdp``), so this changes
    no figure; it saves one evaluation (about a second) per round and federation. The calibration of
    ``z`` (a pure function of the budget) is remembered too."""
    import opacus.accountants.analysis.rdp as rdp

    import lightning_fed.privacy.accountant as accountant
    import lightning_fed.privacy.example_budget as example_budget

    compute_rdp, calibrate = rdp.compute_rdp, accountant.calibrate_noise_multiplier

    def compute_rdp_once(*, q, noise_multiplier, steps, orders):
        key = (q, noise_multiplier, tuple(orders) if isinstance(orders, (list, tuple)) else orders)
        if key not in _RDP:
            _RDP[key] = compute_rdp(q=q, noise_multiplier=noise_multiplier, steps=1, orders=orders)
        return _RDP[key] * steps

    def calibrate_once(*args, **kwargs):
        key = (*args, *sorted(kwargs.items()))
        if key not in _CALIBRATED:
            _CALIBRATED[key] = calibrate(*args, **kwargs)
        return _CALIBRATED[key]

    modules = (accountant, example_budget)
    rdp.compute_rdp = compute_rdp_once
    for module in modules:
        module.calibrate_noise_multiplier = calibrate_once
    try:
        yield
    finally:
        rdp.compute_rdp = compute_rdp
        for module in modules:
            module.calibrate_noise_multiplier = calibrate


@lru_cache(maxsize=8)
def _parsed(config: str, overrides: str):
    """The shipped ``config`` parsed by the CLI's parser (a tiny backbone; ``overrides``, JSON, applied)."""
    cfg = yaml.safe_load(Path(resolve_config(config)).read_text())
    cfg["model"]["init_args"]["backbone"] = {**TINY, "tokenizer": "bytes"}
    cfg["data"]["init_args"]["max_length"] = 512
    for key, value in json.loads(overrides).items():
        if key == "num_clients":
            cfg["data"]["init_args"][key] = value
        elif key == "dp_sgd":
            cfg["model"]["init_args"]["dp_sgd"].update(value)
        else:
            cfg["federation"][key] = value
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{config}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return parse_run(str(path)), cfg


class Stage:
    """What ``ServerRound.close`` hands the released state to: records it (the auditor's view)."""

    def __init__(self) -> None:
        self.states: list[torch.Tensor] = []

    def load_state(self, state) -> None:
        self.states.append(state["w"].detach().to(torch.float64).clone())


_TRAINER = SimpleNamespace(is_global_zero=True, loggers=[], log_dir=None, default_root_dir=None)


class Federation:
    """One federation of the run: its own ``server_round`` (fresh privacy plan and secret), ``N``
    canary slots and one coordinate no canary owns."""

    def __init__(self, setting: Setting) -> None:
        self.setting = setting
        parsed, cfg = _parsed(setting.config, json.dumps(setting.overrides, sort_keys=True))
        run = parsed.run
        self.run = dataclasses.replace(run, strategy=copy.deepcopy(run.strategy))
        self.n = int(cfg["data"]["init_args"]["num_clients"])
        self.server = run_factory.server_round(self.run)
        self.server.bind(self.n)
        self.dp = client_level_dp(self.server.strategy)
        self.clip0 = self.dp.clip_norm
        self.w0 = {"w": torch.zeros(self.n + 1, dtype=torch.float64)}
        self.server.global_state = {k: v.clone() for k, v in self.w0.items()}
        self.server.strategy.setup(self.server.global_state, self.n)
        self.pristine = copy.deepcopy(self.server.strategy.state_dict())

    def round(self, t: int, included: Sequence[bool], stage: Stage) -> list[int]:
        """Round ``t`` through the server: sample, send, receive each canary's update, close."""
        server = self.server
        clients = server.sample(t)
        server.open(t, clients)
        for c in clients:
            start, _ = server.send(c)
            y = start["w"].clone()
            y[c if included[c] else self.n] += BIG * self.clip0
            server.receive(ClientUpdate(c, 16, {"w": y}))
        server.close(_TRAINER, stage)
        return clients

    def epsilon(self) -> float:
        """``privacy/epsilon`` as the run reports it after the rounds run."""
        return float(self.server.privacy.client_dp.epsilon())


def _every_round_steps(states: list[torch.Tensor], beta_1: float) -> list[torch.Tensor]:
    """``s_t = Delta_t - beta_1 Delta_{t-1}``: each round's step with the server momentum peeled off."""
    deltas = [b - a for a, b in zip(states, states[1:])]
    return [d - beta_1 * p for d, p in zip(deltas, [torch.zeros_like(deltas[0]), *deltas])]


def _beta_1(strategy) -> float:
    inner = client_level_dp(strategy).strategy
    return float(getattr(inner, "beta_1", 0.0))


def recover_key(fed: Federation, released: torch.Tensor, bits: int) -> RunSecret | None:
    """The attacker's brute force: the key of the ``2^bits`` space whose noise alone, released by a
    replica federation (the package's own round, planned as the run's), matches ``released`` (the
    state after round 1) on most canary coordinates (those whose sum was 0: a fraction ``1 - q / 2``
    for the right key, none for another)."""
    if not getattr(fed.server.strategy, "releases_empty_rounds", False):
        return None  # SecAgg+: the noise is drawn in per-client shares, never alone (not searched here)
    replica = Federation(fed.setting)  # the same config, fresh objects
    strategy, dp = replica.server.strategy, replica.dp
    for index in range(2**bits):
        secret = low_entropy_key(index)
        install_key(replica.server.privacy, secret)
        strategy.load_state_dict(copy.deepcopy(replica.pristine))
        dp.clip_norm, dp.rounds_done = replica.clip0, 0
        noise_only = strategy.aggregate(replica.w0, [])["w"].to(torch.float64)
        # equal up to the rounding of the strategy's mean over the round's pseudo-updates
        same = torch.isclose(noise_only[: fed.n], released[: fed.n], rtol=1e-9, atol=0.0)
        if same.float().mean() > 0.5:
            return secret
    return None


def client_level_run(setting: Setting, included: Sequence[bool], variant: str = "correct") -> tuple[list[float], float]:
    """The scores of every canary after the run, and the epsilon the run reports."""
    if variant not in CLIENT_VARIANTS:
        raise ValueError(f"client-level variants are {CLIENT_VARIANTS}, got {variant!r}")
    scores: list[float] = []
    eps = math.nan
    with broken(variant, setting.key_bits):
        offset = 0
        while offset < len(included):
            fed = Federation(setting)
            inc = list(included[offset : offset + fed.n])
            inc += [False] * (fed.n - len(inc))
            stage = Stage()
            stage.states.append(fed.w0["w"].clone())
            for t in range(fed.server.rounds):
                fed.round(t, inc, stage)
                if fed.server.stopping:
                    break
            eps = fed.epsilon()
            states = stage.states
            # the adversary does not know which variant runs: it always tries its attack
            if setting.observation == "final_model":  # a key of the shrunk space, else the plain score
                secret = recover_key(fed, states[1], setting.key_bits)
                score = _replay_score(fed, secret, states)
            else:  # the sample recomputed from the config's seed
                score = _known_sample_score(fed, _every_round_steps(states, _beta_1(fed.server.strategy)))
            scores.extend(score[: fed.n].tolist()[: len(included) - offset])
            offset += fed.n
    return scores, eps


def _known_sample_score(fed: Federation, steps: list[torch.Tensor]) -> torch.Tensor:
    """The log-likelihood ratio of "in" given the sample recomputed from the config's seed:
    ``sum_{t in S_i} (mu r_t - mu^2 / 2)``, where ``r_t = s_t / sd_t`` is the round's step in units of
    its spread over the canary coordinates (nearly all noise) and ``mu = 1 / z``, the shift one
    clipped update makes (``z``: the noise multiplier the run reports)."""
    total = torch.zeros(fed.n + 1, dtype=torch.float64)
    seed, rate = run_factory.resolved_seed(fed.run), float(fed.run.sampling_rate)
    mu = 1.0 / float(fed.server.privacy.client_noise_multiplier)
    for t, s in enumerate(steps):
        sampled = poisson_sample_clients(fed.n, rate, seed, t)
        r = s / s[: fed.n].std().clamp(min=1e-300)
        total[sampled] += mu * r[sampled] - mu * mu / 2
    return total


def _replay_score(fed: Federation, secret: RunSecret | None, states: list[torch.Tensor]) -> torch.Tensor:
    """``|w_T - replay_T|``: the run replayed with the recovered key and every canary out."""
    if secret is None:
        return states[-1] - states[0]  # no key found: the plain final-model score
    replica = Federation(fed.setting)
    install_key(replica.server.privacy, secret)
    stage = Stage()
    for t in range(len(states) - 1):
        replica.round(t, [False] * replica.n, stage)
    return (states[-1] - stage.states[-1]).abs()


# ---------------------------------------------------------------------------------- DP-SGD
def example_level_run(
    setting: Setting, included: Sequence[bool], variant: str = "correct"
) -> tuple[list[float], float]:
    """DP-SGD of the shipped module on canary gradients: the scores and the module's reported epsilon."""
    if variant not in EXAMPLE_VARIANTS:
        raise ValueError(f"example-level variants are {EXAMPLE_VARIANTS}, got {variant!r}")
    parsed, cfg = _parsed(setting.config, json.dumps(setting.overrides, sort_keys=True))
    module = parsed.module
    rounds, steps = int(parsed.run.rounds), int(parsed.run.local_steps)
    # one client of 512 canary examples at rate 0.25, as fedit_dpsgd's B / |D_k| (8 of 57 bucketed to 32):
    # the accountant sees only the rate, and a larger client puts more canaries in one data set
    group, batch = 512, 128
    params = {name: p for name, p in module.named_parameters() if p.requires_grad}
    first = next(name for name, p in params.items() if p.numel() >= group)
    scores: list[float] = []
    eps = math.nan
    with broken(variant):
        privacy = RunPrivacy(parsed.run.privacy, parsed.run)
        budget = privacy.plan_example_budget(module, 1, batch, rounds)
        eps = float(budget.epsilon(group, rounds))
        for offset in range(0, len(included), group):
            inc = torch.tensor(list(included[offset : offset + group]) + [False] * group, dtype=torch.float64)[:group]
            install_key(privacy, RunSecret.fresh(), module)  # each client data set: a run with its own secret
            clip = module.dp_sgd.clip_norm
            total = torch.zeros(group, dtype=torch.float64)
            for r in range(rounds):
                turn = TurnPlan(0, steps)
                sampler = RoundBatchSampler(
                    [turn], [0], [group], batch, 0, r, poisson_seed=module.poisson_batch_seed(r)
                )
                for s, rows in enumerate(sampler):
                    released = _dp_sgd_step(module, params, first, rows, inc, clip, (r, s, group))
                    total += released[:group] * batch / clip
            scores.extend(total.tolist()[: len(included) - offset])
    return scores, eps


def _dp_sgd_step(module, params, first, rows, inc, clip, turn) -> torch.Tensor:
    """One step of the module's DP-SGD on the canaries of ``rows``: their per-example gradients as
    Opacus leaves them (``grad_sample`` of the mean loss), then the module's ``on_after_backward``."""
    n = len(rows)
    for name, p in params.items():
        gs = torch.zeros((n, *p.shape), dtype=torch.float32)
        if name == first and n:
            flat = gs.view(n, -1)
            flat[torch.arange(n), torch.tensor(rows)] = (BIG * clip * inc[rows]).float()
        p.grad_sample = gs / max(n, 1)  # the backward of the mean loss: each row divided by n
    module.__dict__["_num_examples"], module.__dict__["_repeated"] = n, None
    round_idx, step, size = turn
    current = SimpleNamespace(round_idx=round_idx, client_id=0, steps=step, num_examples=size)
    original = ExampleLevelDP._trainer_and_turn
    ExampleLevelDP._trainer_and_turn = lambda self: (None, current)  # the federated turn in progress
    try:
        module.on_after_backward()
    finally:
        ExampleLevelDP._trainer_and_turn = original
    return params[first].grad.detach().flatten().to(torch.float64)


# ---------------------------------------------------------------------------------- the audit
def coins(m: int, seed: int) -> list[bool]:
    """The auditor's fair coins: canary ``i`` is included when ``coins[i]``."""
    return (torch.rand(m, generator=torch.Generator().manual_seed(seed)) < 0.5).tolist()


def audit(setting: Setting, variant: str = "correct", seed: int = 0) -> dict:
    """One end-to-end audit: the empirical epsilon next to the run's reported epsilon."""
    included = coins(setting.canaries, seed)
    started = time.perf_counter()
    example = setting.config == "fedit_dpsgd"
    run = example_level_run if example else client_level_run
    with memoized_accounting():
        scores, reported = run(setting, included, variant)
    delta = 1e-5 if example else _delta(setting)
    empirical = one_run_audit(scores, included, delta, setting.guesses)
    return {
        "setting": setting.name,
        "variant": variant,
        "observation": "client upload" if example else setting.observation,
        "seed": seed,
        "canaries": setting.canaries,
        "guesses": list(setting.guesses),
        "delta": delta,
        "reported_epsilon": reported,
        "largest_showable": largest_showable(setting.canaries, delta, setting.guesses),
        "empirical_epsilon": empirical,
        "flagged": empirical > reported,
        "seconds": time.perf_counter() - started,
    }


def _delta(setting: Setting) -> float:
    parsed, cfg = _parsed(setting.config, json.dumps(setting.overrides, sort_keys=True))
    n = int(cfg["data"]["init_args"]["num_clients"])
    return parsed.run.privacy.delta_for(n)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--canaries", type=int, default=CANARIES)
    parser.add_argument("--only", nargs="*", default=None, help="names of SHIPPED settings or CONTROLS to run")
    parser.add_argument("--out", default=None, help="append one JSON line per audit here")
    args = parser.parse_args(argv)
    runs = [(name, s, "correct") for name, s in SHIPPED.items()]
    for name, (setting, variant) in CONTROLS.items():
        runs.append((name, setting, variant))
        if setting.overrides:  # the correct mechanism in the control's own setting too
            runs.append((f"{name} (correct)", setting, "correct"))
    out = open(args.out, "a") if args.out else None  # noqa: SIM115
    for seed in args.seeds:
        for name, setting, variant in runs:
            if args.only and name not in args.only:
                continue
            row = audit(dataclasses.replace(setting, canaries=args.canaries), variant, seed)
            print(
                f"{row['setting']:<36} {variant:<16} {row['observation']:<13} seed {seed}:"
                f" reported {row['reported_epsilon']:.2f}, showable {row['largest_showable']:.2f},"
                f" empirical {row['empirical_epsilon']:.2f}, flagged {row['flagged']} ({row['seconds']:.0f} s)",
                flush=True,
            )
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
    if out:
        out.close()


if __name__ == "__main__":
    main()
