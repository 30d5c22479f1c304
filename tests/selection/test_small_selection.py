"""A coreset smaller than one local batch is reported (or refused), per `on_small_selection`."""

import pytest

from lightning_fed.selection.baselines import RandomSelection
from lightning_fed.selection.coreset import CoresetSelection
from tests.selection.conftest import planted, stand_in_server, tiny_sft


def test_small_coresets_warn_or_stop_before_training():
    module = tiny_sft()
    dm = planted(module, num_clients=2, per_client=40)  # batch_size 8
    small, enough = RandomSelection(ratio=0.05), RandomSelection(ratio=0.5)  # 2 and 20 of 40 examples
    with pytest.warns(
        UserWarning,
        match=r"round 1: RandomSelection left 2 client\(s\) fewer examples than one batch \(data.batch_size=8\):"
        r" client 0: 2 of 40, client 1: 2 of 40",
    ):
        small.on_client_data(stand_in_server(dm), None, module, 0, [0, 1], dm)
    small.on_small_selection = "error"
    with pytest.raises(ValueError, match="on_small_selection='error'"):
        small.on_client_data(stand_in_server(dm), None, module, 1, [0, 1], dm)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        enough.on_client_data(stand_in_server(dm), None, module, 0, [0, 1], dm)
    assert [len(dm.client(c).train_set) for c in (0, 1)] == [20, 20]
    with pytest.raises(
        ValueError,
        match=r"^federation.hooks\[\].on_small_selection must be one of \('warn', 'error', 'ignore'\), got 'refuse'$",
    ):
        CoresetSelection(on_small_selection="refuse")
