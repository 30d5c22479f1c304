"""The secret randomness of a private run, and the key file that lets it resume exactly (issues 32, 40).

In a private run (client-level DP, DP-SGD, or FedBiscuit's noised selector losses) every random
choice the privacy guarantee relies on is drawn from one secret: which clients a round samples
(Poisson amplification assumes the sample is unknown), which examples each DP-SGD step takes
(Poisson batches at rate ``B / |D_k|``), and every Gaussian noise draw. Anyone who could
recompute them could subtract the noise or condition on the sample, so none of them may come
from the config's public ``seed``.

:class:`RunSecret` is 32 bytes (256 bits) from the operating system's CSPRNG
(:func:`secrets.token_bytes`, as Opacus' ``secure_mode`` seeds from ``os.urandom``). Each use gets
its own :class:`~lightning_fed.federation.secret_seed.SecretSeed`, ``HMAC-SHA256(key, label)``
(the standard library's PRF: one reveals nothing of the key or of the others), and each draw a
Philox generator keyed by all of its bits, so a draw depends only on (secret, label) and a
resumed run repeats the uninterrupted one.

The secret is never in a checkpoint, a report or a log line. It is written only to the run's
**key file** in the per-user **key store** (:func:`key_dir`: ``$LIGHTNING_FED_KEY_DIR``, else
``$XDG_DATA_HOME/lightning-fed/keys``, else ``~/.local/share/lightning-fed/keys``; created 0700),
``<run id>.key`` with mode 0600, outside any run folder, so copying or sharing a run folder never
carries it. The run id is 128 random bits, not derived from the config. The checkpoint keeps the
run id and a 64-bit fingerprint of the key (a PRF output: it reveals nothing of the key), so a
resume finds the key file, refuses one that is not the run's own key (another valid key swapped
in: exit 2, before anything is written), and, without it, resumes with a fresh secret and says so
in one warning. Deleting the key file makes the run's noise, sample and batches unrecoverable.
:class:`RunSecret`, the key store and the check of a key file on resume are
:mod:`~lightning_fed.federation.run_key_file` (no Lightning imported: the early checkpoint check
uses them).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_fed.federation.run_key_file import RUN_ID, RunSecret, check_key, key_file, new_run_id


def seeded_secret(seed: int) -> RunSecret:
    """The run secret of a test run that fixed a noise seed in its config (``ClientLevelDP.seed``,
    ``model.dp_sgd.seed``): derived from that seed, so such a run is reproducible and *not*
    private against anyone who has its config (tests only)."""
    return RunSecret(hashlib.sha256(f"lightning-fed test seed/{int(seed)}".encode()).digest())


def _make_key_dir(folder: Path) -> None:
    """Create the key store with mode 0700 (the folders it creates; an existing one is left as it is)."""
    missing = []
    for parent in [folder, *folder.parents]:
        if parent.exists():
            break
        missing.append(parent)
    for path in reversed(missing):
        path.mkdir(mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)  # mkdir's mode is narrowed by the umask, never widened: set it


class RunKey:
    """A private run's secret and its key file: drawn before training, written with the first
    checkpoint, read back on resume.

    Args:
        secret: The run's secret (:meth:`RunSecret.fresh`, or :func:`seeded_secret` in a test).
        seeded: Whether it comes from a noise seed fixed in the config (tests: not private, no key file).
    """

    def __init__(self, secret: RunSecret, seeded: bool = False) -> None:
        self.secret, self.seeded = secret, seeded
        #: The run's id (128 random bits; names its key file), kept in the checkpoint.
        self.run_id = new_run_id()
        #: The run's key file (:func:`key_file`), set by :meth:`attach` (a training run).
        self.path: Path | None = None
        self._written = False

    def attach(self) -> None:
        """The run trains: a private run keeps its secret in its key file in the key store."""
        if not self.seeded:
            self.path = key_file(self.run_id)

    def save(self) -> None:
        """Write the key file once (mode 0600, key store 0700), with one line saying where it is."""
        if self.path is not None and not self._written:
            _make_key_dir(self.path.parent)
            self.secret.write(self.path)
            self._written = True
            rank_zero_info(
                f"private run: its secret randomness is in {self.path} (mode 0600, outside the run folder): keep it"
                " to resume exactly, never share it; deleting it makes the run's noise and sample unrecoverable"
            )

    def state_dict(self) -> dict[str, str]:
        """What the checkpoint keeps: the run id and the key's fingerprint (nothing of the key)."""
        if self.seeded:
            return {}
        return {"id": self.run_id, "fingerprint": self.secret.fingerprint()}

    def resume(self, state: Mapping[str, Any]) -> bool:
        """On a resumed fit from a checkpoint's :meth:`state_dict`: the key file's secret (an exact
        resume), or a fresh one (new run id), said in one warning; a key file with another key is
        refused (:func:`check_key`). ``False``: nothing to resume (a seeded run, or no run attached:
        ``validate``/``test`` of a checkpoint draws nothing)."""
        if self.seeded or self.path is None:
            return False
        run_id = state.get("id")
        secret = check_key(state)
        if secret is not None:
            self.secret, self.run_id = secret, str(run_id)
            self.path, self._written = key_file(self.run_id), True
            return True
        where = key_file(run_id) if isinstance(run_id, str) and RUN_ID.fullmatch(run_id) else "(none recorded)"
        self.secret, self.run_id = RunSecret.fresh(), new_run_id()
        self.path, self._written = key_file(self.run_id), False
        rank_zero_warn(
            f"resuming a private run without its key file {where}: client sampling, DP-SGD batches and"
            f" noise continue from fresh secret randomness (key file {self.path}), not those of the uninterrupted run"
        )
        return True
