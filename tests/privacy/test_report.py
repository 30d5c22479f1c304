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
