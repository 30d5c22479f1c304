"""Distributed DP under SecAgg+ (configs/secagg.yaml) refuses Poisson sampling: the server picks
the sample (no amplification against it) and each client's noise share is sized for the expected
``m``, so a smaller sample would carry less noise than accounted (issue 32, item 4). Exit 2, one
line naming the field and value, before anything is written. The CLI test (a subprocess:
about 10 s on an idle 2-core machine) and an in-process check of the same refusal (about 1 s)."""

from __future__ import annotations

import pytest
import yaml

from lightning_fed.errors import HINT
from lightning_fed.privacy import ClientLevelDP, PrivacyConfig
from lightning_fed.strategies import FedAvg
from tests.deploy.test_transport_parity import tiny_variant
from tests.helpers.cli import lightning_fed

REFUSED = (
    "federation.sampling=poisson cannot run with SecureAggregation around ClientLevelDP: the server picks the sample,"
    " so sampling amplifies nothing against it, and each client's noise share is sized for the expected m clients,"
    " so a smaller sample would carry less noise than accounted; use federation.sampling=fixed_size"
    " (federation.clients_per_round)"
)


def test_poisson_sampling_under_secagg_with_dp_is_refused_when_the_server_is_bound():
    """The plan (before training, when the server is bound to the data) refuses it in one line."""
    from lightning_fed.deploy.secure_aggregation import SecureAggregation
    from tests.privacy.test_run_privacy import _server

    secagg = SecureAggregation(ClientLevelDP(FedAvg(), clip_norm=0.05), max_weight=1.0)
    with pytest.raises(ValueError) as info:
        _server(secagg, PrivacyConfig(target_epsilon=8.0), num_clients=20, sampling="poisson", sampling_rate=0.5)
    assert str(info.value) == REFUSED


def test_poisson_sampling_under_secagg_with_dp_is_refused_before_anything_is_written(tmp_path):
    cfg = tiny_variant("secagg.yaml")
    cfg["federation"].update(sampling="poisson", sampling_rate=0.5)
    cfg["federation"].pop("clients_per_round", None)
    cfg["trainer"]["default_root_dir"] = str(tmp_path / "run")
    config = tmp_path / "secagg_poisson.yaml"
    config.write_text(yaml.safe_dump(cfg))
    proc = lightning_fed("fit", "--config", str(config))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr == f"error: {REFUSED}\n{HINT}\n"
    assert not (tmp_path / "run").exists()
