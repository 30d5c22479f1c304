"""A user's own objective, defined outside the package (``tests/strategies/test_registry.py`` installs it
through an entry point of the group ``lightning_fed.modules``, as a plugin package would)."""

from lightning_fed.modules import SimPOModule


class AnnouncedSimPO(SimPOModule):
    """SimPO that says it was built, with which margin."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        print(f"AnnouncedSimPO built, gamma={self.gamma}", flush=True)
