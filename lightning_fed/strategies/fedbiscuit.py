"""FedBiscuit (Wu et al., 2024, "Towards Federated RLHF with Aggregated Client Preference
for LLMs", arXiv:2407.03038, Algorithm 1).

U binary selectors (U LoRA adapters on one backbone, see
:class:`~lightning_fed.modules.selector.BinarySelectorModule`). Warm-up: selector ``u`` is
trained alone by FedBis for ``warmup_rounds`` rounds, ``u = 0 .. U-1`` in turn. Then every
``tau`` rounds the clients are regrouped (:func:`balanced_assignment`, run by
:class:`~lightning_fed.round_hooks.client_grouping.ClientGrouping` from each client's validation
losses) and each client trains only its cluster's selector. The warm-up aggregates by FedBis'
Eq. (8); afterwards each selector is aggregated by Eq. (6), which keeps a selector stable
when few of its clients are sampled.

Client weights ``w_m`` (``weighting``): ``uniform`` (the default: the authors' FederatedScope
configs set ``federate.ignore_weight: True`` for FedBis and FedBiscuit alike) or
``num_examples`` (``n_m``, the paper's ``p_m = n_m / n``). FedBis is :class:`FedAvg` with the
same ``weighting`` option, so the two are configured alike.

* Warm-up, Eq. (8), ``phi = (M / A) sum_{m in A} p_m phi^m``: as printed, the coefficients sum
  to ``(M / A) sum_{m in A} n_m / n``, which is 1 only in expectation, so the LoRA would be
  rescaled by a random factor each round. Here they are normalised over the sampled clients,
  ``phi = sum_A w_m phi^m / sum_A w_m`` (with uniform weights this *is* Eq. (8)).
* Eq. (6), ``phi_u <- (1 - sum_{A_u} p_m) phi_u + sum_{A_u} p_m phi_u^m``, ``eq6_scope``:
  ``cluster`` (the default) takes ``p_m = w_m / sum_{j in M_u} w_j``, the client's share of its
  *cluster* ``M_u``, so a fully sampled cluster gets the plain (weighted) mean; ``all`` takes
  the paper's literal ``p_m = w_m / sum_{j in [M]} w_j`` over all M clients, which shrinks every
  selector's step by about U (each cluster holds ~M/U clients).

The strategy is pure tensor code: which round it is, the assignment and the clients' sizes
come from the hook (from the clients' replies, so the same under Flower).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor

from lightning_fed.option_rules import FEDBISCUIT, check
from lightning_fed.state import StateDict, compute_dtype
from lightning_fed.strategies.base import AggregationError, ClientUpdate, Strategy, weighted_average


def balanced_assignment(losses: Tensor) -> list[int]:
    """Greedy min-loss assignment of clients to selectors, then balanced (Sec. 3.2, Step 2.1).

    Each client goes to its minimum-loss selector; then, repeatedly, the largest cluster is
    capped at ``ceil(M / U)`` clients (its best-fitting clients stay) and its surplus moves to
    each client's next-best selector that is not full, until the sizes differ by at most one
    (Eq. (5)).

    Args:
        losses: ``(M, U)`` mean validation loss of every selector on every client.

    Returns:
        The selector of each of the ``M`` clients.
    """
    m, u = losses.shape
    cap_hi, n_hi = -(-m // u), m % u or u  # n_hi clusters may hold cap_hi, the rest cap_hi - 1
    order = losses.argsort(dim=1).tolist()  # each client's selectors, best first
    assign = [row[0] for row in order]
    closed: set[int] = set()  # clusters already capped: they take no more clients
    while True:
        sizes = [assign.count(s) for s in range(u)]
        if max(sizes) - min(sizes) <= 1:
            return assign
        big = max((s for s in range(u) if s not in closed), key=lambda s: (sizes[s], -s))
        cap = cap_hi if len(closed) < n_hi else cap_hi - 1  # closed clusters hold exactly their cap
        members = sorted((c for c in range(m) if assign[c] == big), key=lambda c: float(losses[c, big]))
        closed.add(big)
        for c in members[cap:]:
            assign[c] = next(s for s in order[c] if s not in closed)


def selector_of_key(key: str, num_selectors: int) -> int:
    """The selector owning parameter ``key``: adapter ``selector_u`` (u >= 1), else PEFT's ``default`` (0)."""
    for u in range(1, num_selectors):
        if f".selector_{u}." in key:
            return u
    return 0


def eq6_update(current: Mapping[str, Tensor], states: Sequence[Mapping[str, Tensor]], p: Sequence[float]) -> StateDict:
    """``phi_{u,r+1} = (1 - sum_m p_m) phi_{u,r} + sum_m p_m phi^m_{u,r,K}`` (Eq. (6)).

    Args:
        current: The selector's global state ``phi_{u,r}``.
        states: The uploaded states of the selector's participating clients ``A_u``.
        p: Their weights ``p_m``; ``sum p <= 1`` (the clients of the selector that did not
            take part keep their share on the current state).
    """
    total = float(sum(p))
    if not 0 < total <= 1 + 1e-9:
        raise AggregationError(f"Eq. (6) needs 0 < sum of p_m <= 1, got {total}")
    out: StateDict = {}
    for key, x in current.items():
        acc = x.to(compute_dtype(x.dtype)) * (1.0 - total)
        for state, w in zip(states, p):
            acc = acc + float(w) * state[key].to(acc.dtype)
        out[key] = acc.to(x.dtype)
    return out


def eq8_update(states: Sequence[Mapping[str, Tensor]], p: Sequence[float]) -> StateDict:
    """FedBis' aggregation, Eq. (8), normalised: ``phi_{r+1} = sum_{m in A} p_m phi^m / sum_{m in A} p_m``.

    Eq. (8) as printed, ``(M / A) sum_{m in A} p_m phi^m`` with ``p_m = n_m / n``, has
    coefficients summing to 1 only in expectation over the sampled set ``A``; normalising
    makes every round a convex combination. With equal ``p_m = 1 / M`` both are the plain
    mean of the A updates.
    """
    if not states:
        raise AggregationError("Eq. (8) needs at least one update")
    total = float(sum(p))
    if not total > 0:
        raise AggregationError(f"Eq. (8) needs a positive sum of p_m, got {total}")
    return weighted_average(states, p)


def majority_vote(votes: Tensor) -> Tensor:
    """``(N,)`` majority of ``(U, N)`` binary votes (1 = the first response is better); U odd."""
    if votes.shape[0] % 2 == 0:
        raise ValueError(f"majority vote needs an odd number of selectors, got {votes.shape[0]}")
    return (votes.float().sum(0) > votes.shape[0] / 2).long()


class FedBiscuit(Strategy):
    """Clustered training of U binary selectors with balanced client groups.

    Args:
        num_selectors: U; odd, so that majority voting never ties.
        warmup_rounds: T, rounds of FedBis per selector before the first grouping.
        regroup_every: tau, rounds between two client groupings after the warm-up.
        weighting: Client weights ``w_m`` in Eqs. (6) and (8): ``uniform`` (the authors'
            ``ignore_weight: True``, the default) or ``num_examples`` (``n_m``).
        eq6_scope: Whose data ``p_m`` of Eq. (6) is a share of: ``cluster`` (``M_u``, the
            default) or ``all`` (all M clients, the paper's literal definition).
    """

    def __init__(
        self,
        num_selectors: int = 3,
        warmup_rounds: int = 2,
        regroup_every: int = 5,
        weighting: str = "uniform",
        eq6_scope: str = "cluster",
    ) -> None:
        check(
            FEDBISCUIT,
            num_selectors=num_selectors,
            weighting=weighting,
            eq6_scope=eq6_scope,
            warmup_rounds=warmup_rounds,
            regroup_every=regroup_every,
        )
        self.num_selectors, self.warmup_rounds, self.regroup_every = num_selectors, warmup_rounds, regroup_every
        self.weighting, self.eq6_scope = weighting, eq6_scope
        self.round_idx = 0
        self.assignment: list[int] | None = None
        self.client_sizes: list[int] | None = None
        self.selector_keys: list[list[str]] = []

    # ------------------------------------------------------------------------ schedule
    def setup(self, global_state: Mapping[str, Tensor], num_clients: int) -> None:
        super().setup(global_state, num_clients)
        self.selector_keys = [[] for _ in range(self.num_selectors)]
        for key in global_state:
            self.selector_keys[selector_of_key(key, self.num_selectors)].append(key)
        empty = [u for u, keys in enumerate(self.selector_keys) if not keys]
        if empty:
            raise ValueError(
                f"FedBiscuit: no parameters for selectors {empty};"
                f" use BinarySelectorModule(num_selectors={self.num_selectors})"
            )

    @property
    def warmup_end(self) -> int:
        return self.num_selectors * self.warmup_rounds

    def is_warmup(self, round_idx: int) -> bool:
        return round_idx < self.warmup_end

    def is_grouping_round(self, round_idx: int) -> bool:
        """Whether the clients are regrouped at the start of ``round_idx`` (0-based)."""
        return not self.is_warmup(round_idx) and (round_idx - self.warmup_end) % self.regroup_every == 0

    def start_round(self, round_idx: int) -> None:
        self.round_idx = round_idx

    def selector_of(self, client_id: int) -> int:
        """The selector ``client_id`` trains this round."""
        if self.is_warmup(self.round_idx) or self.assignment is None:
            return min(self.round_idx // max(self.warmup_rounds, 1), self.num_selectors - 1)
        return self.assignment[client_id]

    def set_assignment(self, assignment: Sequence[int]) -> None:
        if len(assignment) != self.num_clients or not all(0 <= a < self.num_selectors for a in assignment):
            raise ValueError(
                f"assignment must give one selector in [0, {self.num_selectors}) to each of {self.num_clients} clients"
            )
        self.assignment = list(assignment)

    # ------------------------------------------------------------------------ exchange
    def client_model(self, client_id: int, global_state: Mapping[str, Tensor]) -> Mapping[str, Tensor]:
        """Only the keys of the client's selector are sent (and so trained and uploaded)."""
        return {k: global_state[k] for k in self.selector_keys[self.selector_of(client_id)]}

    def weight(self, client_id: int, members: Sequence[int]) -> float:
        """``p_m = w_m / sum_{j in members} w_j`` (``weighting``; uniform without client sizes).

        The sizes (:attr:`client_sizes`) are what the clients reported at the last grouping.
        """
        if self.weighting == "uniform" or self.client_sizes is None:
            return 1.0 / len(members)
        return self.client_sizes[client_id] / sum(self.client_sizes[c] for c in members)

    def aggregate(self, global_state: Mapping[str, Tensor], updates: Sequence[ClientUpdate]) -> StateDict:
        out: StateDict = {k: v.detach().clone() for k, v in global_state.items()}
        if self.is_warmup(self.round_idx) or self.assignment is None:
            # Warm-up trains one selector by FedBis, aggregated by Eq. (8) (normalised).
            # Eq. (8) normalises over the sampled clients, so their own sizes are all it needs.
            u = self.selector_of(updates[0].client_id) if updates else 0
            keys = self.selector_keys[u]
            p = [1.0 if self.weighting == "uniform" else float(up.num_examples) for up in updates]
            out.update(eq8_update([{k: up.state[k] for k in keys} for up in updates], p))
            return out
        for u in range(self.num_selectors):
            ups = [up for up in updates if self.selector_of(up.client_id) == u]
            if not ups:
                continue
            keys = self.selector_keys[u]
            current = {k: global_state[k] for k in keys}
            if self.eq6_scope == "cluster":
                members = [c for c in range(self.num_clients) if self.assignment[c] == u]  # M_u
            else:
                members = list(range(self.num_clients))  # [M], the paper's literal p_m
            p = [self.weight(up.client_id, members) for up in ups]
            out.update(eq6_update(current, [{k: up.state[k] for k in keys} for up in ups], p))  # Eq. (6)
        return out

    # -------------------------------------------------------------------------- resume
    def state_dict(self) -> dict[str, Any]:
        return {"round_idx": self.round_idx, "assignment": self.assignment, "client_sizes": self.client_sizes}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.round_idx = state.get("round_idx", 0)
        assignment = state.get("assignment")
        self.assignment = list(assignment) if assignment is not None else None
        sizes = state.get("client_sizes")
        self.client_sizes = list(sizes) if sizes is not None else None
