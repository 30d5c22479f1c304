import pytest

from lightning_fed.heterogeneity import RankAssignment, alpha_for_rank


def test_per_client_list():
    assert RankAssignment(per_client=[4, 8, 16]).ranks(3) == [4, 8, 16]
    with pytest.raises(
        ValueError,
        match=r"^federation.hooks: ClientRanks.per_client: 3 ranks for data.num_clients=4 \(one per client\),"
        r" got \[4, 8, 16\]$",
    ):
        RankAssignment(per_client=[4, 8, 16]).ranks(4)


def test_distribution_is_seeded():
    spec = RankAssignment(choices=[4, 8, 16], probabilities=[0.5, 0.3, 0.2], seed=7)
    ranks = spec.ranks(200)
    assert ranks == RankAssignment(choices=[4, 8, 16], probabilities=[0.5, 0.3, 0.2], seed=7).ranks(200)
    assert set(ranks) == {4, 8, 16} and ranks != RankAssignment(choices=[4, 8, 16], seed=8).ranks(200)
    assert RankAssignment(choices=[4, 8], probabilities=[0.0, 1.0]).ranks(5) == [8] * 5


def test_data_column():
    spec = RankAssignment(column="device_rank")
    assert spec.ranks(2, [[4, 4], [16]]) == [4, 16]
    with pytest.raises(
        ValueError,
        match=r"^federation.hooks: ClientRanks.column='device_rank': client 1 needs one positive integer rank,"
        r" got \[4, 8\]",
    ):
        spec.ranks(2, [[4], [4, 8]])
    with pytest.raises(ValueError, match="needs the values of 2 clients, got none"):
        spec.ranks(2)


def test_config_errors_name_the_field_and_value():
    with pytest.raises(
        ValueError, match=r"give exactly one of per_client, choices, column \(got \['per_client', 'column'\]\)"
    ):
        RankAssignment(per_client=[4], column="r")
    with pytest.raises(
        ValueError, match=r"^federation.hooks: ClientRanks.per_client\[1\]: a rank must be a positive integer, got 0$"
    ):
        RankAssignment(per_client=[4, 0])
    with pytest.raises(ValueError, match=r"federation.hooks: ClientRanks.probabilities: 2 values for 3 choices"):
        RankAssignment(choices=[4, 8, 16], probabilities=[0.5, 0.5])


def test_alpha_keeps_the_scaling_equal_across_ranks():
    assert alpha_for_rank(32.0, 4, 16) / 4 == alpha_for_rank(32.0, 16, 16) / 16 == 2.0
    with pytest.raises(ValueError, match="rank must be in"):
        alpha_for_rank(32.0, 32, 16)
