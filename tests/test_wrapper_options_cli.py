"""Options of the strategy wrappers and of the strategies they wrap, a few paths, refused before torch
is imported, in one line naming the option (red-team report rt7, rows 15, 16, 18, 20, 21, 24, 25, 29).

On a8debca each was refused only after torch, Lightning and transformers were imported (11-15 s of
CPU), most in two lines naming no file: ``Option 'count_stdev' is not accepted`` (ClientLevelDP's
``adaptive``), ``adaptive clipping: target_quantile must be in [0, 1], got 1.5``, ``unknown
class_path 'lightning_fed.strategies.FedAdm'`` inside ClientLevelDP, ``TypeError: FedAvg.__init__()
got an unexpected keyword argument 'x'`` (``dict_kwargs``), ``embedded null byte``, a compression
under SecureAggregation (a run check), ``no such checkpoint file`` for an ``http://`` checkpoint and
``ImportError: Install s3fs`` for an ``s3://`` one; ``--config /dev/null`` "does not exist". The
children cannot import torch (``tests/helpers/cli.py``); each runs in an empty folder, which stays empty.
"""

from __future__ import annotations

import os

import pytest

from tests.helpers.refusals import assert_config_refused_before_torch, assert_refused_before_torch, shipped_config


def _dp(config: dict) -> dict:
    """ClientLevelDP's ``init_args`` (feddpo_dp)."""
    return config["federation"]["strategy"]["init_args"]


def _secagg_dp(config: dict) -> dict:
    """The ClientLevelDP's ``init_args`` inside SecureAggregation (secagg)."""
    return config["federation"]["strategy"]["init_args"]["strategy"]["init_args"]


def _rename(mapping: dict, old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


CASES = {
    "adaptive_key_misspelt": (
        "feddpo_dp",
        lambda c: _rename(_dp(c)["adaptive"], "count_stddev", "count_stdev"),
        "federation.strategy.adaptive.count_stdev is not an option of AdaptiveClipping;"
        " did you mean federation.strategy.adaptive.count_stddev?",
    ),
    "adaptive_quantile_above_1": (
        "feddpo_dp",
        lambda c: _dp(c)["adaptive"].update(target_quantile=1.5),
        "federation.strategy.adaptive.target_quantile must be in [0, 1], got 1.5",  # dp_adq (red team 9 row 12)
    ),
    "adaptive_count_stddev_negative": (
        "feddpo_dp",
        lambda c: _dp(c)["adaptive"].update(count_stddev=-2.0),
        "federation.strategy.adaptive.count_stddev must be >= 0, got -2.0",
    ),
    "adaptive_count_stddev_zero": (  # red team 10 row 6c (c_dp_cs): on 3d730d7 refused once bound, 2 lines
        "feddpo_dp",
        lambda c: _dp(c)["adaptive"].update(count_stddev=0),
        "federation.strategy.adaptive.count_stddev must be > 0 with a noise multiplier above 0 (adaptive"
        " clipping needs 2 * count_stddev > noise_multiplier), got 0.0",
    ),
    "adaptive_learning_rate_zero": (
        "feddpo_dp",
        lambda c: _dp(c)["adaptive"].update(learning_rate=0),
        "federation.strategy.adaptive.learning_rate must be > 0, got 0.0",
    ),
    "wrapped_twice_adaptive_quantile": (  # ClientLevelDP inside SecureAggregation: named where it is
        "secagg",
        lambda c: _secagg_dp(c).update(adaptive={"target_quantile": 1.5}),
        "federation.strategy.strategy.adaptive.target_quantile must be in [0, 1], got 1.5",
    ),
    "adaptive_under_secure_aggregation": (  # red team 10 row 12 (c_sa_adapt_ok): on a8354b9 no option path
        "secagg",
        lambda c: _secagg_dp(c).update(adaptive={"target_quantile": 0.5, "count_stddev": 2}),
        "federation.strategy.strategy.adaptive: ClientLevelDP's adaptive clipping cannot run under SecureAggregation"
        " (its noised count is not summed securely); drop adaptive, got {'target_quantile': 0.5,"
        " 'learning_rate': 0.2, 'count_stddev': 2.0}",
    ),
    "wrapped_key_misspelt": (
        "feddpo_dp",
        lambda c: _rename(_dp(c)["strategy"]["init_args"], "beta_1", "beta1"),
        "federation.strategy.strategy.beta1 is not an option of FedAdam;"
        " did you mean federation.strategy.strategy.beta_1?",
    ),
    "wrapped_class_misspelt": (
        "feddpo_dp",
        lambda c: _dp(c)["strategy"].update(class_path="lightning_fed.strategies.FedAdm"),
        "federation.strategy.strategy: unknown class_path 'lightning_fed.strategies.FedAdm';"
        " did you mean lightning_fed.strategies.FedAdam?",
    ),
    "wrapped_twice_key_misspelt": (
        "secagg",
        lambda c: _rename(_secagg_dp(c), "clip_norm", "clip_nrm"),
        "federation.strategy.strategy.clip_nrm is not an option of ClientLevelDP;"
        " did you mean federation.strategy.strategy.clip_norm?",
    ),
    "wrapped_twice_adaptive_key_misspelt": (
        "secagg",
        lambda c: _secagg_dp(c).update(adaptive={"target_quantil": 0.5}),
        "federation.strategy.strategy.adaptive.target_quantil is not an option of AdaptiveClipping;"
        " did you mean federation.strategy.strategy.adaptive.target_quantile?",
    ),
    "compression_under_secure_aggregation": (
        "secagg",
        lambda c: c["federation"].update(compression="int8"),
        "federation.compression='int8' cannot run under federation.strategy=SecureAggregation: the server sees"
        " only the masked sum of the updates, so it cannot decode each client's compressed upload (SecAgg+"
        " quantizes the updates itself); drop federation.compression",
    ),
    "strategy_dict_kwargs_unknown": (
        "tiny",
        lambda c: c["federation"]["strategy"].update(dict_kwargs={"x": 1}),
        "federation.strategy.dict_kwargs.x is not an option of FedAvg; its options: server_lr, weighting",
    ),
    "root_dir_nul": (
        "tiny",
        lambda c: c["trainer"].update(default_root_dir="runs/ti\0ny"),
        "trainer.default_root_dir must be a folder's path, got 'runs/ti\\x00ny' (a path holds no NUL character)",
    ),
}


@pytest.mark.parametrize(("shipped", "mutate", "line"), list(CASES.values()), ids=list(CASES))
def test_a_wrapper_option_is_refused_in_one_line_naming_the_option_and_the_file(tmp_path, shipped, mutate, line):
    config = shipped_config(shipped)
    mutate(config)
    assert_config_refused_before_torch(tmp_path, config, line)


@pytest.mark.parametrize("url", ["http://example.com/x.ckpt", "s3://bucket/x.ckpt"])
def test_a_remote_checkpoint_is_refused_download_it_first(tmp_path, url):
    line = (
        f"ckpt_path {url!r}: a remote checkpoint is not read (every part of a checkpoint is checked on this"
        " machine before a run starts); download it and give the local file"
    )
    assert_refused_before_torch(tmp_path, ["fit", "--config", "tiny", "--ckpt_path", url], line)


def test_a_remote_checkpoint_set_in_a_second_config_file_is_refused_naming_that_file(tmp_path):
    """Red team 8 row 17 (ck07): the line named no file (on 52f9c49)."""
    second = tmp_path / "c.yaml"
    second.write_text("ckpt_path: s3://bucket/last.ckpt\n", encoding="utf-8")
    line = (
        "ckpt_path 's3://bucket/last.ckpt': a remote checkpoint is not read (every part of a checkpoint is"
        " checked on this machine before a run starts); download it and give the local file"
    )
    assert_refused_before_torch(
        tmp_path, ["fit", "--config", "tiny", "--config", str(second)], line, config_file=second
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_config_that_is_no_regular_file_is_not_said_to_be_missing(tmp_path, kind):
    path = "/dev/null" if kind == "device" else str(tmp_path / "fifo")
    if kind == "fifo":
        os.mkfifo(path)
    line = f"--config {path!r}: is not a regular file (a device, FIFO or socket); give a YAML file"
    assert_refused_before_torch(tmp_path, ["fit", "--config", path], line)


def test_the_class_refuses_adaptive_clipping_under_secure_aggregation_with_the_precheck_s_line():
    """SecureAggregation's own check (a config built in Python) says what the precheck says."""
    from lightning_fed.deploy.secure_aggregation import SecureAggregation
    from lightning_fed.privacy import AdaptiveClipping, ClientLevelDP
    from lightning_fed.strategies import FedAdam

    dp = ClientLevelDP(FedAdam(server_lr=0.01), clip_norm=0.05, adaptive=AdaptiveClipping(count_stddev=2.0))
    with pytest.raises(ValueError) as err:
        SecureAggregation(dp)
    assert str(err.value) == CASES["adaptive_under_secure_aggregation"][2]
