"""DP-SGD's per-client ledger of a run: what each client's example-level epsilon is computed from.

Example-level DP is accounted per client (:class:`~lightning_fed.privacy.run.RunPrivacy`): every
client sampled in a round trained in it (one that failed may have spent budget too), at the
bucketed example count its update reported. The ledger keeps, by client, ``[bucketed count (0:
never reported), rounds trained]``; the budget (:class:`~lightning_fed.privacy.example_budget.ExampleBudget`)
turns an entry into an epsilon. It is part of the checkpoint, so a resumed run continues it.
"""

from __future__ import annotations

from typing import Any

from lightning_fed.federation.report import bucket_count
from lightning_fed.privacy.example_budget import ExampleBudget


class ExampleLedger:
    """Each client's bucketed example count and the rounds it trained in (see the module docstring)."""

    def __init__(self) -> None:
        self.clients: dict[int, list[int]] = {}

    def record(self, sampled: Any, updates: Any) -> None:
        """One round: every ``sampled`` client trained; the admitted ``updates`` report their counts."""
        counts = {int(u.client_id): int(u.num_examples) for u in updates}
        for cid in sorted(set(sampled) | set(counts)):
            entry = self.clients.setdefault(int(cid), [0, 0])
            entry[1] += 1
            if counts.get(cid, 0) > 0:
                entry[0] = bucket_count(counts[cid])

    def count_of(self, client_id: int) -> int | None:
        """A client's bucketed count; one that never reported it is taken as the smallest reported
        (a client that failed in every round it was sampled in)."""
        count = self.clients.get(client_id, [0, 0])[0]
        if count:
            return count
        known = [c for c, _ in self.clients.values() if c]
        return min(known) if known else None

    def rounds_trained(self, client_id: int) -> int:
        return self.clients.get(client_id, [0, 0])[1]

    def binding_client(self, budget: ExampleBudget) -> tuple[int, float] | None:
        """``(client, epsilon)`` of the client with the largest DP-SGD epsilon so far (``None``: none trained)."""
        best: tuple[int, float] | None = None
        for cid, (_, trained) in sorted(self.clients.items()):
            count = self.count_of(cid)
            if count is None or trained == 0:
                continue
            eps = budget.epsilon(count, trained)
            if best is None or eps > best[1]:
                best = (cid, eps)
        return best

    def would_exceed(self, budget: ExampleBudget, clients: Any) -> bool:
        """Whether one of ``clients`` training one more round would spend more than its budget."""
        for cid in clients:
            count = self.count_of(cid)
            if count is not None and budget.would_exceed(count, self.rounds_trained(cid)):
                return True
        return False

    def state_dict(self) -> dict[int, list[int]]:
        return {int(c): list(v) for c, v in self.clients.items()}

    def load_state_dict(self, state: dict[Any, Any]) -> None:
        self.clients = {int(c): [int(v[0]), int(v[1])] for c, v in state.items()}
