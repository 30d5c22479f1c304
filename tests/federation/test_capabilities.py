"""Round hooks declare what they do beyond the contract (issue 42 item 6): generic code reads
:attr:`RoundHook.capabilities`, never which methods a class overrides."""

from __future__ import annotations

import pytest

from lightning_fed.batching.fallback import per_client_hook
from lightning_fed.callbacks.lr_schedule import RoundLRSchedule
from lightning_fed.federation.hooks import Capability, RoundHook, reads_client_data
from lightning_fed.round_hooks.client_grouping import ClientGrouping
from lightning_fed.selection.baselines import RandomSelection, ServerSideCoreset
from lightning_fed.selection.hds import HierarchicalDataSelection


class ReadsData(RoundHook):
    capabilities = frozenset({Capability.READS_CLIENT_DATA})

    def on_client_data(self, server, context, module, round_idx, clients, data):
        clients.reverse()


class Timing(RoundHook):
    def on_client_end(self, turn, trainer, module, update):
        pass


class SafeTiming(Timing):
    capabilities = frozenset({Capability.BATCH_SAFE})


def test_the_declaration_decides_what_generic_code_does():
    assert reads_client_data(ReadsData()) and not reads_client_data(RoundHook())
    assert per_client_hook(Timing()) and not per_client_hook(SafeTiming()) and not per_client_hook(RoundHook())
    assert SafeTiming.capabilities == frozenset({Capability.BATCH_SAFE}) and Timing.capabilities == frozenset()


def test_the_package_hooks_declare_theirs():
    both = {Capability.READS_CLIENT_DATA, Capability.BATCH_SAFE}  # the coreset's per-client moments only time a turn
    assert ServerSideCoreset.capabilities == RandomSelection.capabilities == both
    assert HierarchicalDataSelection.capabilities == {Capability.BATCH_SAFE}
    assert (
        Capability.BATCH_SAFE in ClientGrouping.capabilities and Capability.BATCH_SAFE in RoundLRSchedule.capabilities
    )


def test_implementing_an_undeclared_moment_is_refused_where_the_class_is_written():
    with pytest.raises(TypeError) as info:

        class Undeclared(RoundHook):
            def on_client_data(self, server, context, module, round_idx, clients, data):
                pass

    assert str(info.value) == (
        "Undeclared implements on_client_data but does not declare"
        " capabilities = frozenset({Capability.READS_CLIENT_DATA}): it would never be called"
    )


def test_a_capability_is_one_of_the_declared_ones():
    with pytest.raises(TypeError, match=r"^Typo.capabilities: \['batch_save'\] is not a Capability"):

        class Typo(RoundHook):
            capabilities = frozenset({"batch_save"})
