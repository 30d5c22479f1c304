"""The words of the privacy report: the parties who may try to learn about a client, the
protections a channel can have, and one channel's line (:class:`ChannelReport`).

Channels (what a client sends, per method):

* ``update``: the change of the shared state (every method); client-level DP
  (:class:`~lightning_fed.privacy.ClientLevelDP`) and/or example-level DP-SGD
  (:mod:`lightning_fed.privacy.dp_sgd`) bound it; the two guarantees have different units
  (one client's whole data set vs one example) and are listed separately;
* ``metrics``: per-client training losses, accuracies and update norms (with DP on the client
  sends no training loss; the update norm is the server's own figure);
* ``validation``: what the clients' validation data gives the server: per-client validation
  metrics and their example-weighted means over the evaluated clients;
* ``example_counts``: ``|D_k|`` (FedAvg's weights, the report's client sizes);
* ``fedhds_centroids``: FedHDS' group centroids (noised by
  :mod:`lightning_fed.selection.privacy` when ``dp_epsilon`` is set);
* ``selector_losses``: FedBiscuit's per-selector validation losses (they decide the grouping);
  with DP on a Gaussian mechanism on the client (:mod:`lightning_fed.privacy.selector_noise`),
  accounted at rate 1 over the groupings; its client-level epsilon composed with the update
  channel's is ``epsilon.client_all_channels`` (the budget ``target_epsilon`` stays the update
  channel's);
* ``personal_parameters``: FedPDPO/FedPer/FedRep's personal modules: they never leave the
  client and are outside every guarantee here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Who may try to learn about a client or an example, and what each one sees (docs/privacy.md, threat model).
PARTIES = {
    "final_model": "whoever gets the released model: the last global state",
    "run_folder": "whoever reads the run folder: every global state, checkpoints, reports, logs",
    "server": "the server (its operator), during the run",
    "other_client": "another client: the global states it is sent in the rounds it takes part in",
}

#: What each protection means, as written into the report.
PROTECTIONS = {
    "client_dp": "clipped per client, Gaussian noise on the sum (central DP: the server sees each clipped update)",
    "secure_sum": "summed by Flower's SecAgg+: the server sees only the masked sum of the updates",
    "example_dp": "DP-SGD inside the client: per-example clipping and Gaussian noise on every step",
    "gaussian": "Gaussian noise added on the client before sending",
    "bucketed": "rounded down to a power of two before sending",
    "withheld": "sent to the server but never written to reports or logs",
    "not_sent": "the client does not send it",
    "reported": "written to the reports (summary.json, rounds.jsonl, TensorBoard, checkpoints) without noise",
    "local": "never leaves the client; outside the guarantee",
    "none": "sent in the clear",
}


VALIDATION_CHOICES = ("none", "withheld", "reported")
"""What the reports write of the clients' validation data (:data:`VALIDATION_NOTES` says each)."""

VALIDATION_NOTES = {
    "none": "per-client validation metrics and their means over clients, not covered by any epsilon",
    "withheld": "no validation metric computed on the clients' data is written, not even a mean over clients"
    " (federation.privacy.report_validation: true reports the means, unprotected)",
    "reported": "federation.privacy.report_validation: the example-weighted means over the evaluated clients are"
    " written, per-client values withheld; not covered by any epsilon (one evaluated client: its own loss)",
}


@dataclass
class ChannelReport:
    """One channel's line of the report.

    Attributes:
        channel: Its name (``update``, ``metrics``, ...).
        protection: A key of :data:`PROTECTIONS`, or several joined by ``+``.
        guarantees: ``[{"unit": "client"|"example", "epsilon": ..., "delta": ...}]``; empty
            when no DP guarantee covers the channel.
        note: What a reader must know besides.
    """

    channel: str
    protection: str
    guarantees: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        described = " + ".join(PROTECTIONS[p] for p in self.protection.split("+"))
        return {
            "protection": self.protection,
            "means": described,
            "guarantees": self.guarantees,
            "note": self.note,
        }
