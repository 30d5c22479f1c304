"""Upper bounds of the options whose size decides what a run costs (issue 34, item 4).

Every option is checked where it is declared (a dataclass's ``__post_init__``, a module's or
data module's ``__init__``); the bounds those checks share live here, each with why it is
where it is. A value past one is a user error (exit 2, one line naming the option) before
anything is written, instead of a ``MemoryError``, an optimizer overflow, or a run that would
not end in years. Imports only the standard library: every config class may use it.
"""

from __future__ import annotations

from contextvars import ContextVar

MAX_ROUNDS = 1_000_000
"""``federation.rounds``: a record per round stays in memory and in ``rounds.jsonl``; federated
runs in the literature take thousands of rounds, and a million rounds of even one 10 ms step
each is more than a day."""

MAX_LOCAL_STEPS = 1_000_000
"""``federation.local_steps`` (and a hook's ``local_steps``): a client's turn of a million
optimizer steps is a full training run on its own, per round."""

MAX_LOCAL_EPOCHS = 10_000
"""``federation.local_epochs``: passes over a client's data in one turn."""

MAX_CLIENTS = 1_000_000
"""``data.num_clients``: one process holds a ``ClientData`` (and its loaders, its state slot)
per client; every client needs at least one example, so a million clients is a million rows."""

MAX_SYNTHETIC_ROWS = 1_000_000
"""Rows of a ``synthetic:`` set (``data.num_clients`` x ``synthetic_args.examples_per_client``):
generating one takes about 1 KiB of memory and 15 us while drawn (measured: 200,000 rows of
``synthetic:preferences``, 210 MiB peak, 3.0 s on one core), so a million rows is 1 GiB and
15 s before any tokenizing; past that use a data file."""


def synthetic_rows_problem(clients: object, per_client: object) -> str | None:
    """The line refusing a ``synthetic:`` set of more than :data:`MAX_SYNTHETIC_ROWS` rows, or
    ``None`` (also when either size is not a positive integer: its own check names it). Said by
    the data source before the set is drawn and by the precheck before torch is imported."""
    sizes = (clients, per_client)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes):
        return None
    rows = clients * per_client  # type: ignore[operator]
    if rows <= MAX_SYNTHETIC_ROWS:
        return None
    return (
        f"data.num_clients={clients} x data.synthetic_args.examples_per_client={per_client}"
        f" = {rows} rows: a synthetic set holds at most {MAX_SYNTHETIC_ROWS}"
        " (about 1 KiB each while drawn); use fewer, or a data file"
    )


MAX_LR = 10.0
"""``model.lr``: AdamW moves each weight by about ``lr`` per step, so past 10 every weight
leaves any useful range in one step (the shipped configs use 1e-5 to 5e-2); 1e300 overflowed
float32 inside the optimizer (exit 1 after the run folder was written)."""

MAX_BETA = 1_000.0
"""``model.beta`` (DPO and its variants: the inverse temperature of the implicit reward):
papers use 0.01 to 1 (the shipped configs 0.1 and 0.5); 1e300 made the loss non-finite."""

MAX_LORA_ALPHA = 1_000_000.0
"""``model.lora.alpha``: PEFT scales the adapter by ``alpha / r``; the usual ``alpha`` is
``r`` or ``2 r``, with ``r`` at most a few thousand, and 1e300 gave non-finite weights."""

MAX_CONFIG_PARAMETERS = 2_000_000_000
"""A ``model.backbone.config`` (a model built from a transformers config, with random weights: for
tests and tiny demos; a real model is loaded from its checkpoint): its estimated weights,
``layers x (4 hidden^2 + 2 hidden x intermediate) + (vocab + positions) x hidden``. 2e9 float32
weights are 8 GB before gradients and optimizer state; ``n_layer: 2**40`` ran until it was killed
(no output, memory growing)."""

BUILDS_WEIGHTS: ContextVar[bool] = ContextVar("builds_weights", default=True)
"""Whether the command being checked builds the weights a ``model.backbone.config`` describes
(``fit``, ``validate``, ``test``: :data:`MAX_CONFIG_PARAMETERS` applies). ``plan`` builds the model
on the meta device, no memory taken (docs/guides/large-models.md: "a 7B config plans on a
laptop"), and checks the config with this set to ``False``."""
