"""Compressed uploads in the round: the spec, the client/server calls, the loop's bytes and resume."""

import pytest
import torch

from lightning_fed.callbacks import FederatedLoop
from lightning_fed.compression import RESIDUAL_PREFIX, BlockwiseQuantization, TopKSparsification, quantized_nbytes
from lightning_fed.compression.uplink import compress_client_update, compressor_from_spec, decompress_client_update
from lightning_fed.run_config import FederationConfig
from lightning_fed.strategies import AggregationError, ClientUpdate, FedAvg
from tests.helpers.runs import fit, preference_data, tiny_dpo


@pytest.mark.parametrize(
    ("spec", "kind", "setting", "ef"),
    [
        ("int8", BlockwiseQuantization, 8, False),
        ("int8+ef", BlockwiseQuantization, 8, True),
        ("int4+ef", BlockwiseQuantization, 4, True),
        ("topk:0.01", TopKSparsification, 0.01, True),
        ("topk:0.25-noef", TopKSparsification, 0.25, False),
    ],
)
def test_spec_names_the_compressor(spec, kind, setting, ef):
    c = compressor_from_spec(spec)
    assert isinstance(c, kind) and c.error_feedback is ef
    assert (c.bits if kind is BlockwiseQuantization else c.fraction) == setting
    assert compressor_from_spec(None) is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("int9", "federation.compression must be one of int8, int8+ef, int4, int4+ef, topk:<fraction> or"),
        ("topk:0", "federation.compression: the top-k fraction must be in (0, 1], got 'topk:0'"),
        ("topk:x", "federation.compression: the top-k fraction must be in (0, 1], got 'topk:x'"),
    ],
)
def test_bad_spec_is_one_line_naming_the_field(spec, message):
    with pytest.raises(ValueError) as info:
        FederationConfig(compression=spec)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)
    assert repr(spec) in str(info.value)


def test_client_sends_codes_server_decodes_and_the_residual_stays_in_memory():
    """Hand values: the change [1.0, 0.006] in one int8 block has scale 1/127, codes [127, 1],
    decodes to [1, 1/127]; the residual 0.006 - 1/127 is kept in memory and added next time."""
    start = {"w": torch.tensor([2.0, 3.0])}
    update = ClientUpdate(0, 5, {"w": torch.tensor([3.0, 3.006])}, {"control/w": torch.ones(2)}, {"loss": 1.0})
    memory = {"control/w": torch.zeros(2)}
    int8 = compressor_from_spec("int8+ef")
    sent, memory2 = compress_client_update(update, start, int8, memory)
    assert sent.state["w#codes"].dtype == torch.int8 and sent.state["w#codes"].tolist() == [127, 1]
    assert sent.extras is update.extras and sent.metrics == {"loss": 1.0} and sent.num_examples == 5
    assert torch.equal(memory2["control/w"], memory["control/w"])  # other memory untouched
    torch.testing.assert_close(memory2[RESIDUAL_PREFIX + "w"], torch.tensor([0.0, 0.006 - 1 / 127]))
    got = decompress_client_update(sent, start, int8)
    torch.testing.assert_close(got.state["w"], torch.tensor([3.0, 3.0 + 1 / 127]))
    # next round: the same change plus the residual -> 0.006 + (0.006 - 1/127) = 0.00413 -> code 1 again
    again, memory3 = compress_client_update(update, start, int8, memory2)
    assert again.state["w#codes"].tolist() == [127, 1]
    torch.testing.assert_close(memory3[RESIDUAL_PREFIX + "w"], torch.tensor([0.0, 0.012 - 2 / 127]))


def test_a_payload_that_does_not_decode_to_the_start_is_rejected():
    int8 = compressor_from_spec("int8")
    sent, _ = compress_client_update(ClientUpdate(0, 1, {"w": torch.ones(3)}), {"w": torch.zeros(3)}, int8, {})
    with pytest.raises(AggregationError, match="compressed update does not decode: payload w: shape"):
        decompress_client_update(sent, {"w": torch.zeros(4)}, int8)
    with pytest.raises(AggregationError, match="payload keys differ"):
        decompress_client_update(sent, {"v": torch.zeros(3)}, int8)


def _run(tmp_path, rounds, name, ckpt_path=None, compression="int8+ef"):
    loop = FederatedLoop(
        rounds=rounds, clients_per_round=2, local_steps=3, seed=0, strategy=FedAvg(), compression=compression
    )
    fit(tiny_dpo(), preference_data(), loop, str(tmp_path / name), ckpt_path=ckpt_path)
    return loop


def test_loop_counts_the_compressed_bytes_and_resumes_with_the_residuals(tmp_path):
    straight = _run(tmp_path, 3, "straight")
    shapes = {k: v.shape for k, v in straight.server.global_state.items()}
    per_client = sum(quantized_nbytes(s.numel(), len(s), 8, 64) for s in shapes.values())
    fp32 = sum(4 * s.numel() for s in shapes.values())
    assert [r["up_bytes"] for r in straight.server.report.history] == [2 * per_client] * 3
    assert per_client < fp32 / 3  # int8 codes + a scale per 64 values: about a quarter
    trained = {c for r in straight.server.report.history for c in r["aggregated"]}
    for cid in trained:
        memory = straight.store.get(cid)["memory"]
        assert sorted(memory) == sorted(RESIDUAL_PREFIX + k for k in shapes)
        assert any(v.abs().sum() > 0 for v in memory.values())
    first = _run(tmp_path, 2, "first")
    resumed = _run(tmp_path, 3, "resumed", ckpt_path=str(tmp_path / "first" / "ckpt" / "last.ckpt"))
    for k, v in straight.server.global_state.items():
        torch.testing.assert_close(resumed.server.global_state[k], v, rtol=1e-5, atol=1e-7)
    for cid in trained:
        for k, v in straight.store.get(cid)["memory"].items():
            torch.testing.assert_close(resumed.store.get(cid)["memory"][k], v, rtol=1e-5, atol=1e-7)
    assert any(not torch.equal(first.server.global_state[k], v) for k, v in straight.server.global_state.items())
    full = _run(tmp_path, 1, "full", compression=None)
    assert full.server.report.history[0]["up_bytes"] == 2 * fp32


def test_a_flower_reply_carries_integer_codes_only_in_a_compressed_run():
    from lightning_fed.deploy.records import record_to_update, update_to_record

    sent, _ = compress_client_update(
        ClientUpdate(3, 7, {"w": torch.tensor([1.0, 0.5])}), {"w": torch.zeros(2)}, compressor_from_spec("int8"), {}
    )
    record = update_to_record(sent)
    got = record_to_update(record, compressed=True)
    assert got.state["w#codes"].dtype == torch.int8 and torch.equal(got.state["w#codes"], sent.state["w#codes"])
    with pytest.raises(ValueError, match=r"reply array state/'w#codes' must be floating-point, got torch.int8"):
        record_to_update(record)
