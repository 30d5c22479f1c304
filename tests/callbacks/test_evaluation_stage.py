"""A standalone ``validate``/``test`` of a private run that opted into ``report_validation``
writes the means over the clients only, as the rounds' evaluations do (the run through the CLI:
``tests/privacy/test_standalone_stages.py``)."""

from lightning_fed.callbacks.evaluation_stage import means_only


def test_means_only_keeps_the_overall_means_and_the_data_totals():
    results = {
        "stage": "test",
        "num_examples": 6,
        "metrics": {"loss": 0.5, "loss_client_min": 0.2, "loss_client_p50": 0.5, "loss_client_max": 0.9},
        "clients": {"0": {"loss": 0.2, "num_examples": 2}, "1": {"loss": 0.65, "num_examples": 4}},
        "groups": {"positive": {"loss": 0.2, "num_examples": 2}},
        "data": {"truncated": [1, 0, 3], "dataset": "synthetic:preferences"},
    }
    assert means_only(results) == {
        "stage": "test",
        "num_examples": 6,
        "metrics": {"loss": 0.5},
        "clients": {},
        "groups": {},
        "data": {"truncated": 4, "dataset": "synthetic:preferences"},
    }
