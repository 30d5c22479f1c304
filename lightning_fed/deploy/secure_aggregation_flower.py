"""Flower's SecAgg+ driving our rounds: the client's mod and reply.

The server's half, Flower's ``SecAggPlusWorkflow`` running our train messages, is the SecAgg+
train round (:mod:`lightning_fed.deploy.train_rounds.secure`). Flower's client mod reads the reply
of the wrapped handler as a legacy ``FitRes`` (``recorddict_to_fitres``: records
``fitres.parameters``, ``fitres.num_examples``, ``fitres.metrics``, ``fitres.status``). So, on
the client, :func:`secure_train_mod` routes a train message that carries SecAgg+ configs through
``secaggplus_mod``; the train handler then replies with the client's contribution in the
``FitRes`` layout (:func:`contribution_reply`). Cryptography, masking and unmasking are all
Flower's; what travels up from a client in the collect stage is Flower's masked integer vector
(its arrays are cleared by the mod) and the ``fitres`` metrics.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.compat.common.recorddict_compat import fitres_to_recorddict

from lightning_fed.deploy.secure_aggregation import NOISE_SHARE_KEY, SecureAggregation
from lightning_fed.strategies.base import ClientUpdate

#: The ``fitres.metrics`` keys a contribution reply echoes (the server checks them).
ROUND_KEY, CLIENT_KEY, NONCE_KEY = "lf-round", "lf-client-id", "lf-nonce"


def is_secure(message: Message) -> bool:
    """Whether ``message`` is a step of Flower's SecAgg+ protocol (it carries its configs)."""
    return message.metadata.message_type == MessageType.TRAIN and RECORD_KEY_CONFIGS in message.content.config_records


# ------------------------------------------------------------------------------ client side
def secure_train_mod(msg: Message, context: Context, call_next: Any) -> Message:
    """Run ``secaggplus_mod`` for SecAgg+ train messages; pass plain ones through.

    Flower's mod quantizes the handler's reply with numpy's global generator; the handler seeds
    it (:func:`contribution_reply`) so both transports round alike, and it is restored here.
    """
    if not is_secure(msg):
        return call_next(msg, context)
    # The mod pops its stage from the configs record: a transport hands each node its own copy of
    # a message, an in-process grid may share one content among nodes, so this node's is copied.
    records = dict(msg.content.items())
    records[RECORD_KEY_CONFIGS] = ConfigRecord(dict(msg.content.config_records[RECORD_KEY_CONFIGS]))
    msg.content = RecordDict(records)
    saved = np.random.get_state()
    try:
        return secaggplus_mod(msg, context, call_next)
    finally:
        np.random.set_state(saved)


def contribution_reply(
    strategy: SecureAggregation,
    received: dict[str, torch.Tensor],
    update: ClientUpdate,
    round_idx: int,
    nonce: str,
    downlink: dict[str, torch.Tensor] | None = None,
) -> RecordDict:
    """The client's contribution as the legacy ``FitRes`` that ``secaggplus_mod`` masks.

    Its metrics echo the round, client id and nonce of the message (the reply's binding); the
    numpy generator is left seeded with the client's rounding seed for the mod's quantization.
    """
    share = (downlink or {}).get(NOISE_SHARE_KEY)
    c = strategy.contribution(received, update, round_idx, None if share is None else float(share))
    metrics = {ROUND_KEY: round_idx, CLIENT_KEY: update.client_id, NONCE_KEY: nonce}
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(c.arrays), int(c.weight), metrics)
    np.random.seed(strategy.rounding_seed(round_idx, update.client_id))
    return fitres_to_recorddict(fitres, keep_input=False)
