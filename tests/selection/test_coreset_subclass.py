"""A coreset method's `choose` is always asked: a subclass nothing would call is refused."""

from __future__ import annotations

import pytest

from lightning_fed.selection.baselines import ServerSideCoreset
from lightning_fed.selection.coreset import CoresetSelection, Selection
from lightning_fed.selection.hds import HierarchicalDataSelection


def keep_all(self, server, trainer, module, round_idx, clients) -> Selection:
    return Selection({c: list(range(len(server.datamodule.client(c).full_train))) for c in clients})


def test_a_choose_that_nothing_calls_is_a_type_error():
    """On main such a class (benchmarks/fedhds_bench.py's FullData was one) was accepted and
    silently left every client on all its data, recording nothing."""
    with pytest.raises(TypeError, match=r"FullData implements `choose` but nothing calls it .*ServerSideCoreset"):
        type("FullData", (CoresetSelection,), {"choose": keep_all})


def test_server_side_and_reply_driven_subclasses_are_accepted():
    server_side = type("FullData", (ServerSideCoreset,), {"choose": keep_all})
    assert server_side().history == []
    hds = type("MyHDS", (HierarchicalDataSelection,), {"choose": HierarchicalDataSelection.choose})
    assert issubclass(hds, CoresetSelection)
