"""The round plan as data, and what decides that a hook cannot run under Flower."""

from lightning_fed.federation.hooks import Capability, RoundHook, reads_client_data
from lightning_fed.federation.round_plan import FixedPlan, RoundPlan
from lightning_fed.federation.turn import TurnPlan
from lightning_fed.selection.baselines import CentralizedCoreset, GlobalSelect, PerplexitySelection, RandomSelection
from lightning_fed.selection.hds import HierarchicalDataSelection


def test_a_plan_lists_the_training_clients_in_batch_order():
    plan = RoundPlan(3, sampled=(1, 4, 7), turns=(TurnPlan(7, 2), TurnPlan(1, 3)), instructions={7: {0: {"a": 1}}})
    assert plan.clients == [7, 1] and plan.num_batches == 5  # client 4 was left out by a hook
    assert FixedPlan(plan).next_round() is plan


def test_what_a_hook_implements_decides_whether_it_reads_client_data_on_the_server():
    class Asks(RoundHook):  # asks the clients: runs under Flower
        def client_queries(self, server, trainer, module, round_idx, clients):
            return {c: {} for c in clients}

    class Reads(RoundHook):
        capabilities = frozenset({Capability.READS_CLIENT_DATA})

        def on_client_data(self, server, context, module, round_idx, clients, data):
            pass

    local = [RandomSelection(), PerplexitySelection(), CentralizedCoreset(), GlobalSelect(figures=False)]
    assert [reads_client_data(h) for h in local] == [True] * 4
    assert not reads_client_data(HierarchicalDataSelection(figures=False))  # FedHDS asks the clients
    assert not reads_client_data(RoundHook()) and not reads_client_data(Asks()) and reads_client_data(Reads())
