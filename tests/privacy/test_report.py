import json

import pytest

from lightning_fed.privacy import PrivacyAccountant, PrivacyReport, bucket_count, redact_client_metrics


def test_bucket_count_by_hand():
    assert [bucket_count(n) for n in (1, 2, 3, 4, 37, 64, 1000)] == [1, 2, 2, 4, 32, 64, 512]
    with pytest.raises(ValueError, match="an example count must be >= 1, got 0"):
        bucket_count(0)


def test_metrics_are_withheld_when_private():
    metrics = {"loss": 0.3, "token_acc": 0.9}
    assert redact_client_metrics(metrics, private=False) == metrics
    assert redact_client_metrics(metrics, private=True) == {}


def test_without_dp_every_channel_says_so():
    section = PrivacyReport(personal_parameters=True).section(rounds=3)
    json.dumps(section)
    assert section["enabled"] is False and section["epsilon"] == {}
    channels = section["channels"]
    assert channels["update"]["protection"] == "none" and channels["update"]["guarantees"] == []
    assert channels["metrics"]["protection"] == "none" and channels["example_counts"]["protection"] == "none"
    assert channels["personal_parameters"]["protection"] == "local"
    assert "outside the guarantee" in channels["personal_parameters"]["means"]


def test_client_and_example_dp_each_with_their_epsilon():
    client = PrivacyAccountant(1.0, 0.1, 1e-5, target_epsilon=5.0)
    example = PrivacyAccountant(2.0, 0.05, 1e-6)
    report = PrivacyReport(
        client_dp=client,
        example_dp=example,
        local_steps_per_round=10,
        centroids={"max_epsilon": 0.8, "delta": 1e-5},
        selector_losses=True,
        counts_bucketed=True,
        metrics_withheld=True,
    )
    section = report.section(rounds=4)
    json.dumps(section)
    update = section["channels"]["update"]
    assert update["protection"] == "client_dp+example_dp"
    # 4 rounds at the client level; 4 * 10 local steps at the example level
    assert update["guarantees"] == [
        {"unit": "client", "epsilon": client.epsilon(4), "delta": 1e-5},
        {"unit": "example", "epsilon": example.epsilon(40), "delta": 1e-6},
    ]
    assert section["epsilon"] == {"client": client.epsilon(4), "example": example.epsilon(40)}
    assert section["channels"]["metrics"]["protection"] == "withheld"
    assert section["channels"]["example_counts"]["protection"] == "bucketed"
    assert section["channels"]["fedhds_centroids"]["guarantees"][0]["epsilon"] == 0.8
    assert section["channels"]["selector_losses"]["protection"] == "none"
    assert section["client_level"]["target_epsilon"] == 5.0 and section["client_level"]["sample_rate"] == 0.1
    assert "trusted server" in section["trust_model"]
    report.stopped(next_round=7)
    assert report.section(4)["stopped"] == {
        "before_round": 7,
        "reason": "the next round would exceed federation.privacy.target_epsilon",
    }


def test_fedhds_without_noise_is_reported_as_clear():
    section = PrivacyReport(centroids={}).section(1)
    assert section["channels"]["fedhds_centroids"] == {
        "protection": "none",
        "means": "sent in the clear",
        "guarantees": [],
        "note": "",
    }


def _opacus(mechanism, z, q, steps, delta):
    """Opacus' own accountant on one history entry: the figures the report must give."""
    from opacus.accountants import PRVAccountant, RDPAccountant

    acc = RDPAccountant() if mechanism == "rdp" else PRVAccountant()
    acc.history = [(z, q, steps)]
    return acc.get_epsilon(delta=delta)


@pytest.mark.parametrize("mechanism", ["rdp", "prv"])
def test_one_epsilon_per_adversary_central_dp_with_poisson_sampling(mechanism):
    """feddpo_dp's setting (z = 1.383, q = 0.25, 10 rounds): amplified against those who cannot see
    the sample, no guarantee against the central server (it sees each clipped update)."""
    client = PrivacyAccountant(1.383, 0.25, 1e-5, target_epsilon=4.0, mechanism=mechanism)
    section = PrivacyReport(client_dp=client, counts_bucketed=True, metrics_withheld=True, validation="withheld")
    parties = section.section(rounds=10)["adversaries"]
    json.dumps(parties)
    amplified = _opacus(mechanism, 1.383, 0.25, 10, 1e-5)
    for party in ("final_model", "run_folder", "other_client"):
        assert parties[party]["epsilon"] == {"client": pytest.approx(amplified)}
        assert "Poisson sampling at rate 0.25 amplifies" in parties[party]["why"]
    assert parties["server"]["epsilon"] == {"client": "inf"}
    assert parties["server"]["why"].startswith("trusted server (central DP)")
    assert parties["final_model"]["not_covered"] == [] and parties["other_client"]["not_covered"] == []
    # a Poisson round's size shows in its byte counts (comm/up_bytes): not covered by the accountant
    assert parties["run_folder"]["not_covered"] == ["example_counts", "sample_size"]
    assert parties["server"]["not_covered"] == ["metrics", "validation", "example_counts"]


@pytest.mark.parametrize("mechanism", ["rdp", "prv"])
def test_against_the_server_of_a_secure_sum_there_is_no_amplification(mechanism):
    """Under SecAgg+ the server sees only the noised sum but picks the sample: its epsilon is
    Opacus' at sample rate 1, larger than the amplified one the others get."""
    client = PrivacyAccountant(1.0, 0.25, 1e-5, mechanism=mechanism)
    parties = PrivacyReport(client_dp=client, secure_sum=True).section(rounds=6)["adversaries"]
    server = parties["server"]["epsilon"]["client"]
    assert server == pytest.approx(_opacus(mechanism, 1.0, 1.0, 6, 1e-5))
    assert parties["final_model"]["epsilon"]["client"] == pytest.approx(_opacus(mechanism, 1.0, 0.25, 6, 1e-5))
    assert server > 2 * parties["final_model"]["epsilon"]["client"]
    assert "picks the sample: accounted at rate 1" in parties["server"]["why"]


def test_example_level_dp_alone_holds_against_every_party_for_examples_only():
    """fedit_dpsgd's setting: DP-SGD on the client (z = 1.82, rate 0.25, 40 steps of the most
    exposed client): the same example-level epsilon against everyone, no client-level guarantee."""
    example = PrivacyAccountant(1.82, 0.25, 1e-5)
    report = PrivacyReport(example_dp=example, example_steps=40, counts_bucketed=True, metrics_withheld=True,
                           validation="withheld")  # fmt: skip
    parties = report.section(rounds=4)["adversaries"]
    for party, entry in parties.items():
        assert entry["epsilon"] == {"client": "inf", "example": pytest.approx(_opacus("rdp", 1.82, 0.25, 40, 1e-5))}
        assert entry["why"].startswith("no client-level DP"), party
        assert "secret randomness" in entry["why"]
    without = PrivacyReport().section(rounds=1)["adversaries"]
    assert all(e["epsilon"] == {"client": "inf"} and "update" in e["not_covered"] for e in without.values())


def test_dp_sgd_ledger_in_the_checkpoint_costs_the_run_folder_its_amplification():
    """DP-SGD's per-client ledger (rounds each client trained) is in the checkpoint, so whoever has the
    run folder sees the sample: no amplification by sampling against it (found from outside, issue 40);
    whoever gets only the final model keeps it."""
    client = PrivacyAccountant(1.0, 0.25, 1e-5)
    report = PrivacyReport(client_dp=client, example_dp=PrivacyAccountant(2.0, 0.05, 1e-6), example_steps=10)
    parties = report.adversaries(rounds=3)
    unamplified = PrivacyAccountant(1.0, 1.0, 1e-5).epsilon(3)
    assert parties["final_model"]["epsilon"]["client"] == client.epsilon(3) < unamplified
    assert parties["run_folder"]["epsilon"]["client"] == unamplified
    assert "per_client_rounds" in parties["run_folder"]["not_covered"]
    assert "per_client_rounds" not in parties["final_model"]["not_covered"]
    without_dp_sgd = PrivacyReport(client_dp=client).adversaries(rounds=3)
    assert without_dp_sgd["run_folder"]["epsilon"]["client"] == client.epsilon(3)
