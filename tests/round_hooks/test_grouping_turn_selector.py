"""In process every client of a round is prepared (``prepare_client``: ``use_selector``) before the
first turn, on one shared module: each turn must train its own client's selector, not the last
prepared one (found by issue 32's secret sample: client 0 of FedBiscuit's grouping round trained
selector 1 and uploaded an unchanged selector 2, unlike the same client over Flower)."""

from lightning_fed.round_hooks.client_grouping import ClientGrouping


class Module:
    def __init__(self):
        self.client_selectors, self.active = {}, None

    def use_selector(self, u):
        self.active = u


def test_each_turn_switches_to_its_clients_selector():
    hook, module = ClientGrouping(), Module()
    for client, selector in ((0, 2), (2, 1)):  # planning: both prepared, the module left on selector 1
        hook.prepare_client(module, None, client, 3, {"selector": selector})
    assert module.active == 1
    hook.on_client_start(None, None, module, 0)
    assert module.active == 2
    hook.on_client_start(None, None, module, 2)
    assert module.active == 1
