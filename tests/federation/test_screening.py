"""Update screening against values worked out by hand."""

import pytest
import torch

from lightning_fed.federation.screening import UpdateScreen, update_norm
from lightning_fed.strategies.base import AggregationError, ClientUpdate


def _update(state):
    return ClientUpdate(client_id=7, num_examples=3, state=state)


def test_norm_is_over_every_tensor():
    start = {"a": torch.zeros(2), "b": torch.ones(1)}
    assert update_norm(start, {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([5.0])}) == pytest.approx(
        5.0
    )  # sqrt(9 + 16)


def test_no_bound_passes_everything():
    up = _update({"a": torch.tensor([1e6])})
    assert UpdateScreen()({"a": torch.zeros(1)}, up) == (up, False)


def test_reject_names_client_norm_and_bound():
    with pytest.raises(AggregationError, match=r"client 7: update norm 5 exceeds federation.max_update_norm=1.0"):
        UpdateScreen(1.0, "reject")({"a": torch.zeros(2)}, _update({"a": torch.tensor([3.0, 4.0])}))


def test_clip_scales_the_change_not_the_weights():
    start = {"a": torch.tensor([1.0, 1.0])}
    out, clipped = UpdateScreen(1.0, "clip")(start, _update({"a": torch.tensor([4.0, 5.0])}))  # change (3, 4), norm 5
    assert clipped
    torch.testing.assert_close(out.state["a"], torch.tensor([1.6, 1.8]))  # 1 + (3, 4) / 5


def test_below_bound_is_untouched():
    up = _update({"a": torch.tensor([0.3, 0.4])})
    assert UpdateScreen(1.0, "clip")({"a": torch.zeros(2)}, up) == (up, False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"max_norm": 0}, "max_update_norm must be > 0, got 0"), ({"mode": "drop"}, "on_large_update must be one of")],
)
def test_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        UpdateScreen(**kwargs)
