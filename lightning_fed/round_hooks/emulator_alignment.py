"""EmulatorAlignment: FedBiOT's server-side emulator distillation (Wu et al., 2024, arXiv:2406.17706).

Before each round's broadcast (Algorithm 1, lines 3-6) the server takes E steps on
mini-batches of a public data set minimising Eq. (2),

    ||E(x) - E*(x)||^2 + lambda * KL(M(x; A, E) || M(x; A, E*)),

with the adapter ``A`` (the freshly aggregated global adapter) and ``E*`` frozen. Before
round 1 it can also distil once for ``distill_steps`` steps: the paper's 500 iterations
before FL, and the only distillation of FedOT / offsite-tuning (``steps_per_round=0``).

The emulator is server state: it is saved and restored through :meth:`state_dict`, and
the public batches are drawn from a generator seeded by (run seed, round), so a resumed
run aligns exactly as an uninterrupted one. The hook also counts what each client
receives (adapter + emulator whenever it changed + the frozen embeddings/head on first
contact) and writes it with the full model's size into ``summary.json`` under
``hooks.EmulatorAlignment``.

The aligned emulator reaches a client through the hook's client instruction (Algorithm 1,
line 6: the server sends ``A`` and ``E``): ``emulator_version`` always, and the emulator's
tensors (``emulator/<name>``) whenever the client does not hold that version yet, which is
exactly what the byte count above charges. The client half (:meth:`prepare_client`) loads them
into its module before its turn, so a Flower client trains on the server's aligned emulator as
the in-process clients do. The frozen embeddings/head are counted on first contact but not
sent: a client builds them from the run's config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from lightning_fed.datamodules.templates import format_prompt, format_response
from lightning_fed.federation.hooks import Payload, RoundHook
from lightning_fed.federation.sampling import derive_seed
from lightning_fed.hook_rules import ALIGNMENT_OPTIMIZERS, EMULATOR_ALIGNMENT
from lightning_fed.round_hooks.alignment_loss import alignment_loss
from lightning_fed.state import clone_state, state_nbytes
from lightning_fed.value_rules import check

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_fed.federation.context import RoundContext
    from lightning_fed.federation.server_round import ServerRound
    from lightning_fed.modules.fedbiot import OffsiteModule

OPTIMIZERS = ALIGNMENT_OPTIMIZERS
_TAG = 20240625  # separates the alignment's random draws from the loop's


class EmulatorAlignment(RoundHook):
    """Aligns the compressed emulator with the full model on a public data set (Eq. (2)).

    Args:
        dataset: The public data set: ``synthetic:<name>``, a local file, or a hub name
            (loaded like the federated data, see :mod:`~lightning_fed.datamodules.sources`).
        kind: Its record kind, ``instruction`` or ``preference`` (text = prompt + response).
        field_map: Canonical field -> source column.
        split: Hub split.
        synthetic_args: Arguments of the synthetic generator.
        template: Prompt template of the public texts: ``alpaca``, ``plain`` or ``chat`` (the
            backbone tokenizer's chat template, end-of-turn marker included; use the run's
            ``data.template``). Preference records are ``prompt + chosen`` as is, except with
            ``chat``, where they are rendered as a user and an assistant turn.
        system_prompt: System message of the ``chat`` template (the run's ``data.system_prompt``).
        max_length: Tokens kept per public example.
        max_examples: Use at most this many public examples (the first ones).
        batch_size: Public examples per alignment step.
        steps_per_round: ``E``, alignment steps before every round (0: FedOT).
        distill_steps: One-time distillation steps before round 1.
        lam: ``lambda``, the weight of the KL term.
        lr: Learning rate of the emulator's optimizer.
        optimizer: ``sgd`` (the paper's) or ``adamw``. The optimizer is created afresh for
            every call, so it carries no state to resume; a fresh AdamW takes sign-like first
            steps that can raise the KL after a round's adapter change (measured on the tiny
            test model: 0.018 -> 0.040 in 5 steps, where SGD goes 0.072 -> 0.066).
        kl_direction: ``eq2`` (as printed) or ``teacher_first``.
        l2_term: How Eq. (2)'s first term is reduced, see
            :func:`~lightning_fed.round_hooks.alignment_loss.emulator_l2`: ``sum`` (as printed, the
            default), ``mean`` (per hidden dimension), ``rms`` (normalised by
            ``E*(x)``'s mean square, the authors' code) or ``off`` (KL only). On SmolLM2 the
            ``sum`` term is ~1e7 per token against a KL of ~3 (massive activations), so the
            KL has no say; ``mean``/``rms`` bring the two to comparable scales. Note that the
            paper's ablation "without layerwise alignment" (Tables 5-6) is, in the authors' code
            (``layerwise_distill=False``), matching only the emulator's *output* (what every
            value here does), as opposed to matching each student layer with its teacher layer.
    """

    def __init__(
        self,
        dataset: str = "synthetic:instructions",
        kind: str = "instruction",
        field_map: dict[str, str] | None = None,
        split: str = "train",
        synthetic_args: dict[str, Any] | None = None,
        template: str = "alpaca",
        system_prompt: str | None = None,
        max_length: int = 128,
        max_examples: int | None = 512,
        batch_size: int = 4,
        steps_per_round: int = 10,
        distill_steps: int = 0,
        lam: float = 1.0,
        lr: float = 0.01,
        optimizer: str = "sgd",
        kl_direction: str = "eq2",
        l2_term: str = "sum",
    ) -> None:
        check(  # lightning_fed/hook_rules.py
            EMULATOR_ALIGNMENT,
            steps_per_round=steps_per_round,
            distill_steps=distill_steps,
            batch_size=batch_size,
            max_length=max_length,
            max_examples=max_examples,
            lam=lam,
            lr=lr,
            optimizer=optimizer,
            kl_direction=kl_direction,
            l2_term=l2_term,
            template=template,
        )
        self.l2_term = l2_term
        self.dataset, self.kind, self.field_map, self.split = dataset, kind, field_map, split
        self.synthetic_args, self.template, self.max_length = synthetic_args, template, max_length
        self.system_prompt = system_prompt
        self.max_examples, self.batch_size = max_examples, batch_size
        self.steps_per_round, self.distill_steps, self.lam = steps_per_round, distill_steps, float(lam)
        self.lr, self.optimizer, self.kl_direction = float(lr), optimizer, kl_direction
        self._examples: list[list[int]] | None = None
        self._pending: dict[str, Tensor] | None = None  # emulator restored before the module is known
        self._module: OffsiteModule | None = None  # the server's model, bound at the first round
        self.distilled = False
        self.version = 0  # bumped whenever the emulator changes
        self.client_versions: dict[int, int] = {}  # the emulator version each client holds
        self.received: list[dict[str, Any]] = []  # per round: bytes each sampled client receives
        self.history: list[dict[str, float]] = []  # per alignment call: Eq. (2) terms before/after
        self._sending: set[int] = set()  # this round's clients that get the emulator's tensors
        self._held: dict[int, int] = {}  # client side: the emulator version each client loaded

    # ------------------------------------------------------------------------ public data
    def public_examples(self, tokenizer: Any) -> list[list[int]]:
        """Token ids of the public texts (prompt + response), loaded and validated once."""
        if self._examples is None:
            from lightning_fed.datamodules.sources import load_public_records

            option = "federation.hooks: EmulatorAlignment.dataset"
            records = load_public_records(
                option, self.dataset, self.kind, self.split, self.field_map, self.synthetic_args
            )
            rows = records.to_list()[: self.max_examples]
            if self.kind == "instruction":
                texts = [self._text(tokenizer, r["instruction"], r.get("input") or "", r["output"]) for r in rows]
            elif self.template == "chat":
                texts = [self._text(tokenizer, r["prompt"], "", r["chosen"]) for r in rows]
            else:
                texts = [r["prompt"] + r["chosen"] for r in rows]
            self._examples = [tokenizer(t)["input_ids"][: self.max_length] for t in texts]
        return self._examples

    def _text(self, tokenizer: Any, instruction: str, input: str, response: str) -> str:  # noqa: A002
        """Prompt and response in :attr:`template`, as the federated data renders them."""
        args = {"tokenizer": tokenizer, "system_prompt": self.system_prompt}
        prompt = format_prompt(self.template, instruction, input, **args)
        return prompt + format_response(self.template, instruction, response, input, prompt=prompt, **args)

    def _batch(
        self, examples: list[list[int]], rows: list[int], pad_id: int, device: torch.device
    ) -> dict[str, Tensor]:
        width = max(len(examples[i]) for i in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for j, i in enumerate(rows):
            ids[j, : len(examples[i])] = torch.tensor(examples[i])
            mask[j, : len(examples[i])] = 1
        return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}

    # ------------------------------------------------------------------------ server work
    def align(self, module: OffsiteModule, steps: int, seed: int) -> dict[str, float]:
        """Take ``steps`` optimizer steps on Eq. (2), each on a random public mini-batch.

        Only the emulator is trained; all modules run in eval mode (no dropout), and the
        previous train/eval modes and ``requires_grad`` flags are restored afterwards.
        Returns the mean loss of the first and of the last step.

        Raises:
            FloatingPointError: If the loss is not finite (the learning rate is too high for
                the scale of Eq. (2)'s L2 term); the flags and modes are restored first.
        """
        examples = self.public_examples(module.tokenizer)
        g = torch.Generator().manual_seed(seed)
        emulator = list(module.emulator_parameters().values())
        flags = {p: p.requires_grad for p in module.parameters()}
        modes = {m: m.training for m in module.modules()}
        module.eval()
        for p in flags:
            p.requires_grad_(False)
        for p in emulator:
            p.requires_grad_(True)
        opt_cls = torch.optim.SGD if self.optimizer == "sgd" else torch.optim.AdamW
        opt = opt_cls(emulator, lr=self.lr)
        losses = []
        try:
            with torch.enable_grad():
                for step in range(steps):
                    rows = torch.randint(len(examples), (self.batch_size,), generator=g).tolist()
                    batch = self._batch(examples, rows, module.tokenizer.pad_token_id, module.device)
                    loss, l2, kl = alignment_loss(module, batch, self.lam, self.kl_direction, self.l2_term)
                    if not torch.isfinite(loss):
                        # A NaN emulator would otherwise be sent to every client and train
                        # nothing; on real models ||E(x) - E*(x)||^2 can be ~1e7 per token.
                        raise FloatingPointError(
                            f"EmulatorAlignment: Eq. (2) loss is {loss.item()} (l2={l2.item()}, kl={kl.item()}) at step"
                            f" {step + 1} of {steps}; lower alignment.lr (got {self.lr}),"
                            f" use alignment.optimizer=adamw or alignment.l2_term=mean (got {self.l2_term})"
                        )
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    losses.append(loss.item())
        finally:
            for p, flag in flags.items():
                p.requires_grad_(flag)
                p.grad = None
            for m, mode in modes.items():
                m.training = mode
        if steps:
            self.version += 1
        return {"loss_first": losses[0], "loss_last": losses[-1]} if losses else {}

    @torch.no_grad()
    def divergence(self, module: OffsiteModule, num_examples: int = 32) -> dict[str, float]:
        """Mean Eq. (2) terms (``l2``, ``kl``) over the first ``num_examples`` public examples."""
        examples = self.public_examples(module.tokenizer)
        rows = list(range(min(num_examples, len(examples))))
        was_training = module.training
        module.eval()
        try:
            totals = {"l2": 0.0, "kl": 0.0}
            chunks = [rows[i : i + self.batch_size] for i in range(0, len(rows), self.batch_size)]
            for chunk in chunks:
                batch = self._batch(examples, chunk, module.tokenizer.pad_token_id, module.device)
                _, l2, kl = alignment_loss(module, batch, self.lam, self.kl_direction, self.l2_term)
                totals["l2"] += float(l2) * len(chunk)
                totals["kl"] += float(kl) * len(chunk)
        finally:
            module.train(was_training)
        return {k: v / len(rows) for k, v in totals.items()}

    # ------------------------------------------------------------------------------ hooks
    def _bind(self, module: OffsiteModule) -> None:
        self._module = module
        if self._pending is not None:
            module.load_state(self._pending)
            self._pending = None

    def setup_server(self, server: ServerRound, context: RoundContext, module: pl.LightningModule) -> None:
        self._bind(module)  # a resumed run's emulator is in the module before any evaluation

    def on_round_start(
        self, server: ServerRound, context: RoundContext, module: pl.LightningModule, round_idx: int, clients: list[int]
    ) -> None:
        """Distil (once), align for E steps with the global adapter, then count the broadcast."""
        self._bind(module)
        module.load_state(server.global_state)  # A of Eq. (2) is the global adapter
        if not self.distilled:
            record = self.align(module, self.distill_steps, derive_seed(server.seed, _TAG))
            self.history.append({"round": 0, "phase": "distill", **record})
            self.distilled = True
        if self.steps_per_round:
            record = self.align(module, self.steps_per_round, derive_seed(server.seed, _TAG, round_idx + 1))
            self.history.append({"round": round_idx + 1, "phase": "align", **record})
            if context.is_global_zero and record:
                for logger in context.loggers:
                    logger.log_metrics({f"align/{k}": v for k, v in record.items()}, step=round_idx + 1)
        self._count_broadcast(server, module, round_idx, clients)

    def _count_broadcast(self, server: ServerRound, module: OffsiteModule, round_idx: int, clients: list[int]) -> None:
        adapter = state_nbytes(server.global_state)  # counted by the loop itself
        emulator = state_nbytes(module.emulator_parameters())
        frozen = state_nbytes(module.frozen_client_state())
        per_client, self._sending = {}, set()
        for cid in clients:
            extra = (emulator if self.client_versions.get(cid) != self.version else 0) + (
                frozen if cid not in self.client_versions else 0
            )
            if self.client_versions.get(cid) != self.version:
                self._sending.add(cid)
            self.client_versions[cid] = self.version
            server.add_round_bytes(down=extra)
            per_client[str(cid)] = adapter + extra
        self.received.append({"round": round_idx + 1, "bytes": per_client})
        self._sizes = {
            "full_model_bytes": module.full_model_nbytes(),
            "client_model_bytes": state_nbytes(module.client_state()),
            "adapter_bytes": adapter,
            "emulator_bytes": emulator,
            "frozen_bytes": frozen,
        }

    def client_instruction(self, server: ServerRound, client_id: int, round_idx: int) -> Payload:
        """The emulator version, and its tensors when ``client_id`` does not hold it yet."""
        out: Payload = {"emulator_version": self.version}
        if client_id in self._sending and self._module is not None:
            out.update({f"emulator/{k}": v.detach() for k, v in self._module.emulator_parameters().items()})
        return out

    def prepare_client(
        self, module: pl.LightningModule, data: Any, client_id: int, round_idx: int, instruction: Payload
    ) -> None:
        """Client side: load the emulator the server sent (a client keeps the one it holds otherwise)."""
        if "emulator_version" not in instruction:
            return
        version = int(instruction["emulator_version"])
        emulator = {k.split("/", 1)[1]: v for k, v in instruction.items() if k.startswith("emulator/")}
        if emulator:
            unknown = sorted(emulator.keys() - module.emulator_parameters().keys())
            if unknown:
                raise ValueError(f"EmulatorAlignment: the server sent emulator tensors this model lacks: {unknown[:5]}")
            module.load_state(emulator)
            self._held[client_id] = version
        elif self._held.get(client_id, version) != version:
            raise ValueError(
                f"EmulatorAlignment: client {client_id} holds emulator version {self._held[client_id]},"
                f" the server expects version {version} and did not send it"
            )

    def summary(self) -> dict[str, Any]:
        """Model sizes, the bytes each sampled client received per round, and the alignment record."""
        return {**getattr(self, "_sizes", {}), "received_per_round": self.received, "alignment": self.history}

    # ----------------------------------------------------------------------------- resume
    def state_dict(self) -> dict[str, Any]:
        if self._pending is not None:
            emulator = self._pending
        else:
            emulator = clone_state(self._module.emulator_parameters()) if self._module is not None else {}
        return {
            "emulator": emulator,
            "distilled": self.distilled,
            "version": self.version,
            "client_versions": dict(self.client_versions),
            "received": list(self.received),
            "history": list(self.history),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._pending = clone_state(state["emulator"]) if state.get("emulator") else None
        self.distilled = state.get("distilled", False)
        self.version = state.get("version", 0)
        self.client_versions = {int(k): v for k, v in state.get("client_versions", {}).items()}
        self.received = list(state.get("received", []))
        self.history = list(state.get("history", []))
