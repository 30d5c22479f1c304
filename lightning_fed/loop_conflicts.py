"""Lightning ``trainer.*`` values the federated loop cannot honour, refused before torch.

A round is ``federation.local_steps`` optimizer steps per client, driven by
:class:`~lightning_fed.callbacks.FederatedLoop`; three of Lightning's own options defeat it while
staying inside Lightning's bounds (:mod:`lightning_fed.trainer_options`). Found by the fifth outside
run from the installed wheel:

- ``fast_dev_run`` (``true`` or a number of batches): Lightning limits every loop to that many
  batches behind the loop's back; exit 1 ``RuntimeError: shape mismatch`` in the batched clients,
  ``summary.json`` written straight into ``default_root_dir``;
- ``limit_train_batches: 0``: no client trains, the run exits 0 with the round-0 evaluation only;
- ``val_check_interval: 0``: Lightning's ``ZeroDivisionError`` (exit 1) after the run folder was made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def loop_conflict_problem(trainer: Mapping[str, Any]) -> str | None:
    """The line refusing a ``trainer.*`` value the federated loop cannot run with, or ``None``."""
    fast = trainer.get("fast_dev_run")
    if fast is True or (isinstance(fast, int) and not isinstance(fast, bool) and fast >= 1):
        return (
            f"trainer.fast_dev_run={fast!r} cannot drive federated rounds; for a quick check use"
            " --federation.rounds=1 --federation.local_steps=1"
        )
    limit = trainer.get("limit_train_batches")
    if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit == 0:
        return (
            f"trainer.limit_train_batches={limit!r} trains nothing; each client's steps per round are"
            " federation.local_steps"
        )
    interval = trainer.get("val_check_interval")
    if isinstance(interval, (int, float)) and not isinstance(interval, bool) and interval == 0:
        return "trainer.val_check_interval must be > 0 (a fraction of a round or a number of batches), got 0"
    return None
