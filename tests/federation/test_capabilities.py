"""Round hooks declare what they do beyond the contract (issue 42 item 6): generic code reads
:attr:`RoundHook.capabilities`, never which methods a class overrides."""

from __future__ import annotations

import pytest

from lightning_fed.batching.fallback import batch_safe, batching_fallback
from lightning_fed.callbacks.lr_schedule import RoundLRSchedule
from lightning_fed.evaluation.heldout import HeldOutRouge
from lightning_fed.federation.hooks import Capability, RoundHook, reads_client_data
from lightning_fed.heterogeneity import AsyncArrivals, ClientRanks, FLoRAMerge, SystemHeterogeneity
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
    assert batch_safe(SafeTiming()) and not batch_safe(Timing()) and not batch_safe(RoundHook())
    assert SafeTiming.capabilities == frozenset({Capability.BATCH_SAFE}) and Timing.capabilities == frozenset()


def test_the_package_hooks_declare_theirs():
    both = {Capability.READS_CLIENT_DATA, Capability.BATCH_SAFE}  # the coreset's per-client moments only time a turn
    assert ServerSideCoreset.capabilities == RandomSelection.capabilities == both
    assert HierarchicalDataSelection.capabilities == {Capability.BATCH_SAFE}
    assert (
        Capability.BATCH_SAFE in ClientGrouping.capabilities and Capability.BATCH_SAFE in RoundLRSchedule.capabilities
    )
    for hook in (AsyncArrivals, ClientRanks, SystemHeterogeneity, HeldOutRouge):  # nothing of theirs in a turn
        assert Capability.BATCH_SAFE in hook.capabilities, hook
    assert Capability.BATCH_SAFE in FLoRAMerge.capabilities  # in one process every client starts from one merged base


def test_a_new_hook_is_batched_only_once_it_declares_batch_safe(tiny_backbone):
    """Whatever a new hook overrides (the per-client moments included, through a mixin or an
    assignment where no method is written in the class), batching reads only its declaration:
    undeclared, the clients train one after another, which is correct for any hook."""
    from lightning_fed.modules import LoraSettings, SFTModule

    def on_client_start(self, turn, trainer, module):
        pass

    class Mixin:
        def on_client_end(self, turn, trainer, module, update):
            pass

    class Assigned(RoundHook):
        pass

    Assigned.on_client_start = on_client_start  # an override no look at the class body would see
    module = SFTModule(tiny_backbone, lora=LoraSettings(r=2, alpha=4))
    for cls in (Assigned, type("Mixed", (Mixin, RoundHook), {}), type("Quiet", (RoundHook,), {})):
        assert (
            batching_fallback(module, [cls()])
            == f"the round hook {cls.__name__} does not declare Capability.BATCH_SAFE"
        )
        declared = type(f"Safe{cls.__name__}", (cls,), {"capabilities": frozenset({Capability.BATCH_SAFE})})
        assert batching_fallback(module, [declared()]) is None


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
