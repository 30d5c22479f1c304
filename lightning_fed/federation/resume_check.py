"""Resuming with ``--ckpt_path``: the checkpoint must be readable and come from the same run.

Lightning resumes from whatever checkpoint it is given and keeps the new config's values for
everything the checkpoint does not hold, so a resumed run with another ``num_clients``,
partition or seed silently trains a different federation. :func:`check_resume` compares the
config the run was started with (``summary.json``'s ``config``, also stored in the checkpoint
by :class:`~lightning_fed.federation.report.RoundReport`) with the new one:

* a change to anything that decides the result (model, LoRA, data, partition, federation,
  strategy, optimizer, seeds, precision, gradient accumulation) is a
  :class:`~lightning_fed.errors.CheckpointError` naming the key, the old and the new value;
* a change to what only decides how long or how visibly the run goes on (``federation.rounds``,
  logging, devices, progress bar, ``trainer.max_epochs``...) is allowed and returned, for the
  CLI to report.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_fed.config_changes import (  # torch-free: the precheck compares a run's config.yaml too
    DERIVED_SEEDS as DERIVED_SEEDS,
)
from lightning_fed.config_changes import MAY_CHANGE as MAY_CHANGE
from lightning_fed.config_changes import NOT_COMPARED as NOT_COMPARED
from lightning_fed.config_changes import RESULT_SECTIONS as RESULT_SECTIONS
from lightning_fed.config_changes import RESULT_TRAINER_KEYS as RESULT_TRAINER_KEYS
from lightning_fed.config_changes import WEIGHT_KEYS as WEIGHT_KEYS
from lightning_fed.config_changes import compare_configs, evaluation_refusal, resume_refusal, weight_changes
from lightning_fed.config_changes import decides_result as decides_result
from lightning_fed.config_changes import flatten_config as flatten_config
from lightning_fed.errors import CheckpointError
from lightning_fed.federation.checkpoint_io import read_checkpoint
from lightning_fed.federation.state_check import check_state, named
from lightning_fed.federation.store import STATES_DIR, ClientStateStore, state_layout
from lightning_fed.federation.version_folder import checkpoint_run


def saved_config(ckpt: dict[str, Any]) -> dict[str, Any] | None:
    """The resolved config stored in a lightning-fed checkpoint (``None`` for older checkpoints)."""
    fed = ckpt.get("federation")
    report = fed.get("report") if isinstance(fed, Mapping) else None
    config = report.get("config") if isinstance(report, Mapping) else None
    return config if isinstance(config, dict) else None


def check_resume(path: str | Path, config: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    """Check that the checkpoint at ``path`` can resume a run of ``config``.

    Args:
        path: The checkpoint (read unless ``old`` is given).
        config: The resolved config of the run about to resume.
        old: The checkpoint's stored config, when already read (:func:`saved_config`).

    Returns:
        The allowed changes (``"key: old -> new"``), for the caller to report.

    Raises:
        CheckpointError: the file is unreadable, or a key that decides the result changed.
    """
    if old is None:
        old = saved_config(read_checkpoint(path))
    if old is None:
        return []
    forbidden, allowed = compare_configs(old, config)
    if forbidden:
        raise CheckpointError(resume_refusal(path, forbidden))
    return allowed


def check_evaluation(path: str | Path, config: dict[str, Any], old: dict[str, Any] | None) -> None:
    """Check that the checkpoint at ``path`` holds weights of the model ``config`` builds.

    Raises:
        CheckpointError: the module class, backbone, LoRA layout or a layout option of the class
            changed (:func:`~lightning_fed.config_changes.weight_changes`; names key old -> new).
    """
    if old is None:
        return
    forbidden, _ = compare_configs(old, config)
    if changes := weight_changes(forbidden, old):
        raise CheckpointError(evaluation_refusal(path, changes))


def check_weights(path: str | Path, ckpt: Mapping[str, Any], module: Any) -> None:
    """Check every tensor a checkpoint gives the run against the module about to use it.

    Lightning loads ``state_dict`` with ``strict=False`` and the loop copies
    ``federation.global_state`` in as it is: an unknown key would be skipped silently, a missing
    one would leave that parameter at its random start, and a wrong shape, a NaN or a string
    would fail only after the run folder was made (or not at all: a NaN update is rejected every
    round). Here, before anything is written (:mod:`~lightning_fed.federation.state_check`):

    * ``state_dict``: each tensor names a parameter of the model, with its shape, finite;
    * ``federation.global_state`` (what drives the federation): exactly the module's shared
      parameters, each of its shape and dtype, finite;
    * the client state files ``federation.clients`` references: each is the file the checkpoint
      names, of that client, finite, and fits the module's personal parameters
      (:meth:`~lightning_fed.federation.store.ClientStateStore.check_files`).

    Args:
        path: The checkpoint file (for the message; its run's ``client_states/`` is looked for
            beside it when the index's folder is gone).
        ckpt: The checkpoint as :func:`~lightning_fed.federation.checkpoint_io.read_checkpoint` read it.
        module: The :class:`~lightning_fed.modules.base.FederatedModule` of this run (or any
            ``nn.Module``: then only ``state_dict`` is checked).

    Raises:
        CheckpointError: One line naming the file, the section and the first bad key.
    """
    hint = "use a checkpoint of this config's model"
    # Every shared parameter is in the state_dict a run writes (personal ones are left out between
    # turns, the frozen backbone always): a missing one would silently keep its random start.
    required = list(module.shared_parameters()) if hasattr(module, "shared_parameters") else ()
    check_state(
        ckpt["state_dict"], module.state_dict(), named("ckpt_path", path, "state_dict"), required=required, hint=hint
    )
    fed = ckpt.get("federation")
    if fed is None or not hasattr(module, "shared_parameters"):
        return  # not written by a FederatedLoop: Lightning restores the weights, the federation starts afresh
    if not isinstance(fed, Mapping):
        raise CheckpointError(f"ckpt_path {str(path)!r}: 'federation' is a {type(fed).__name__}, expected a mapping")
    where = named("ckpt_path", path, "federation.global_state")
    if "global_state" not in fed:
        raise CheckpointError(f"{where} is missing: the federation resumes from it; {hint}")
    shared = module.shared_parameters()
    check_state(
        fed["global_state"], shared, where, exact_dtype=True, unknown="shared parameter of this model", hint=hint
    )
    clients = fed.get("clients")
    if clients:
        if not isinstance(clients, Mapping):
            raise CheckpointError(
                f"ckpt_path {str(path)!r}: 'federation.clients' is a {type(clients).__name__}, expected a mapping"
            )
        store = ClientStateStore()
        store.load_state_dict(
            dict(clients), folder=Path(path).absolute().parent.parent / STATES_DIR, run=checkpoint_run(path)
        )
        store.check_files(state_layout(module.personal_parameters(), shared, memory_shapes=False))
