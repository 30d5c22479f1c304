"""Behaviour shared by the FedOpt family; each variant's hand values live in its own file."""

import pytest
import torch

from lightning_fed.strategies import AggregationError, ClientUpdate, FedAdagrad, FedAdam, FedOpt, FedYogi

VARIANTS = [FedAdagrad, FedAdam, FedYogi]


def test_fedopt_is_abstract():
    with pytest.raises(TypeError):
        FedOpt()


@pytest.mark.parametrize("cls", VARIANTS)
def test_defaults_follow_the_paper(cls):
    strategy = cls()
    assert (strategy.server_lr, strategy.beta_1, strategy.beta_2, strategy.tau) == (1e-2, 0.9, 0.99, 1e-3)


@pytest.mark.parametrize("cls", VARIANTS)
def test_setup_initialises_m_to_zero_and_v_to_tau_squared(cls):
    strategy = cls(tau=0.5)
    strategy.setup({"w": torch.tensor([1.0, 2.0], dtype=torch.bfloat16)}, num_clients=3)
    state = strategy.state_dict()
    torch.testing.assert_close(state["m"]["w"], torch.zeros(2))
    torch.testing.assert_close(state["v"]["w"], torch.full((2,), 0.25))  # tau**2
    assert state["m"]["w"].dtype == torch.float32 and state["step"] == 0


@pytest.mark.parametrize("cls", VARIANTS)
def test_step_count_dtype_and_inputs(cls):
    x = {"w": torch.tensor([1.0, 2.0], dtype=torch.bfloat16)}
    ups = [ClientUpdate(0, 4, {"w": torch.tensor([2.0, 0.0], dtype=torch.bfloat16)})]
    strategy = cls(server_lr=0.1)
    strategy.setup(x, num_clients=1)
    out = strategy.aggregate(x, ups)
    out = strategy.aggregate(out, ups)
    assert strategy.step == 2
    assert out["w"].dtype == torch.bfloat16 and out["w"].device.type == "cpu"
    torch.testing.assert_close(x["w"], torch.tensor([1.0, 2.0], dtype=torch.bfloat16))
    torch.testing.assert_close(ups[0].state["w"], torch.tensor([2.0, 0.0], dtype=torch.bfloat16))


@pytest.mark.parametrize("cls", VARIANTS)
def test_zero_updates_raise(cls):
    strategy = cls()
    strategy.setup({"w": torch.zeros(2)}, num_clients=1)
    with pytest.raises(AggregationError, match="zero updates"):
        strategy.aggregate({"w": torch.zeros(2)}, [])


@pytest.mark.parametrize("cls", VARIANTS)
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"server_lr": 0.0}, "federation.strategy.server_lr must be > 0 or null, got 0.0"),
        ({"beta_1": 1.0}, r"federation.strategy.beta_1 must be in \[0, 1\), got 1.0"),
        ({"beta_1": -0.5}, r"federation.strategy.beta_1 must be in \[0, 1\), got -0.5"),
        ({"beta_2": 1.5}, r"federation.strategy.beta_2 must be in \[0, 1\), got 1.5"),
        ({"tau": 0.0}, "federation.strategy.tau must be > 0, got 0.0"),
        ({"weighting": "equal"}, "federation.strategy.weighting must be one of"),
    ],
)
def test_invalid_hyper_parameters(cls, kwargs, message):
    with pytest.raises(ValueError, match=message):
        cls(**kwargs)


@pytest.mark.parametrize("cls", VARIANTS)
def test_load_state_dict_tolerates_missing_keys(cls):
    strategy = cls()
    strategy.setup({"w": torch.zeros(2)}, num_clients=1)
    strategy.load_state_dict({})
    assert set(strategy.state_dict()) == {"m", "v", "step"}
    torch.testing.assert_close(strategy.v["w"], torch.full((2,), 1e-6))


def test_openfedllm_reference_defaults():
    """OpenFedLLM's ``fedopt_eta = 1e-3`` and uniform deltas; explicit values still win."""
    for cls in VARIANTS:
        strategy = cls(reference="openfedllm")
        assert (strategy.server_lr, strategy.weighting, strategy.tau) == (1e-3, "uniform", 1e-3)
        assert cls(reference="openfedllm", server_lr=0.5, weighting="num_examples").weighting == "num_examples"
        assert (cls().server_lr, cls().weighting) == (1e-2, "num_examples")
    with pytest.raises(ValueError, match=r"federation.strategy.reference must be one of \('reddi', 'openfedllm'\)"):
        FedAdam(reference="flower")


def test_openfedllm_fedadam_two_rounds_hand_values():
    x0 = {"w": torch.tensor([1.0, 2.0], dtype=torch.float64)}
    ups1 = [
        ClientUpdate(0, 1, {"w": torch.tensor([3.0, 2.0], dtype=torch.float64)}),
        ClientUpdate(1, 3, {"w": torch.tensor([1.0, 4.0], dtype=torch.float64)}),
    ]
    ofl = FedAdam(server_lr=1.0, beta_1=0.5, beta_2=0.5, tau=1.0, reference="openfedllm")
    ofl.setup(x0, num_clients=2)  # v_{-1} = tau^2 = 1
    # Round 1: uniform mean (1 vs 3 examples ignored) = [2, 3]; Delta = [1, 1]
    #   m_0 = Delta = [1, 1]  (Reddi: 0.5 * 0 + 0.5 * [1, 1] = [0.5, 0.5])
    #   v = 0.5 * 1 + 0.5 * m^2 = [1, 1];  sqrt(v) + tau = [2, 2];  x = [1, 2] + [1, 1] / 2 = [1.5, 2.5]
    x1 = ofl.aggregate(x0, ups1)
    torch.testing.assert_close(x1["w"], torch.tensor([1.5, 2.5], dtype=torch.float64))
    # Round 2: both clients at [14.5, 3.5]: Delta = [13, 1]
    #   m = 0.5 * [1, 1] + 0.5 * [13, 1] = [7, 1]
    #   v = 0.5 * [1, 1] + 0.5 * [49, 1] = [25, 1] (updated with m^2, not Delta^2 = [169, 1])
    #   x = [1.5, 2.5] + [7 / (5 + 1), 1 / (1 + 1)] = [1.5 + 7/6, 3]
    same = {"w": torch.tensor([14.5, 3.5], dtype=torch.float64)}
    x2 = ofl.aggregate(x1, [ClientUpdate(0, 1, same), ClientUpdate(1, 3, same)])
    torch.testing.assert_close(ofl.m["w"], torch.tensor([7.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(ofl.v["w"], torch.tensor([25.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(x2["w"], torch.tensor([1.5 + 7 / 6, 3.0], dtype=torch.float64))
    # The same first round under Reddi (uniform weighting for a like-for-like m):
    #   m = [0.5, 0.5], v = 0.5 + 0.5 * 1 = 1, x = [1, 2] + [0.5, 0.5] / 2 = [1.25, 2.25]
    reddi = FedAdam(server_lr=1.0, beta_1=0.5, beta_2=0.5, tau=1.0, weighting="uniform")
    reddi.setup(x0, num_clients=2)
    torch.testing.assert_close(reddi.aggregate(x0, ups1)["w"], torch.tensor([1.25, 2.25], dtype=torch.float64))


def test_openfedllm_fedadagrad_has_no_momentum():
    x0 = {"w": torch.tensor([1.0, 2.0])}
    strategy = FedAdagrad(server_lr=1.0, beta_1=0.5, tau=0.75, reference="openfedllm")
    strategy.setup(x0, num_clients=1)  # v_{-1} = 0.5625
    # Round 1: Delta = [1, 0] = m;  v = 0.5625 + [1, 0] = [1.5625, 0.5625];  sqrt + tau = [2, 1.5]
    #   x = [1, 2] + [1 / 2, 0] = [1.5, 2]
    x1 = strategy.aggregate(x0, [ClientUpdate(0, 1, {"w": torch.tensor([2.0, 2.0])})])
    torch.testing.assert_close(x1["w"], torch.tensor([1.5, 2.0]))
    # Round 2: Delta = [3, -1] = m (no 0.5 * m_prev);  v = [10.5625, 1.5625];  sqrt + tau = [4, 2]
    #   x = [1.5, 2] + [3 / 4, -1 / 2] = [2.25, 1.5]   (Reddi's FedAdagrad test: m = [1.75, -0.5])
    x2 = strategy.aggregate(x1, [ClientUpdate(0, 1, {"w": torch.tensor([4.5, 1.0])})])
    torch.testing.assert_close(strategy.m["w"], torch.tensor([3.0, -1.0]))
    torch.testing.assert_close(x2["w"], torch.tensor([2.25, 1.5]))


def test_openfedllm_fedyogi_first_round():
    x0 = {"w": torch.tensor([1.0, 2.0])}
    strategy = FedYogi(server_lr=1.0, beta_2=0.5, tau=1.0, reference="openfedllm")
    strategy.setup(x0, num_clients=1)  # v_{-1} = 1
    # Delta = [4, 0] = m_0;  m^2 = [16, 0];  sign(v - m^2) = [-1, +1]
    #   v = [1 + 0.5 * 16, 1 - 0] = [9, 1];  x = [1, 2] + [4 / (3 + 1), 0] = [2, 2]
    x1 = strategy.aggregate(x0, [ClientUpdate(0, 1, {"w": torch.tensor([5.0, 2.0])})])
    torch.testing.assert_close(strategy.v["w"], torch.tensor([9.0, 1.0]))
    torch.testing.assert_close(x1["w"], torch.tensor([2.0, 2.0]))
