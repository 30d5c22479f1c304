"""Property test of data files (issue 22): whatever a JSONL/CSV preference file holds (columns,
types, encodings, sizes), setting the data up either serves every client or raises a user
error (exit 2 before training) on one line naming the file or the data option."""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from lightning_fed.datamodules import PreferenceDataModule
from lightning_fed.modules.backbone import byte_tokenizer
from tests.boundary.properties import assert_user_error

TOKENIZER = byte_tokenizer()
FIELDS = ["prompt", "chosen", "rejected", "client", "group", "extra"]
texts = st.text(max_size=40) | st.sampled_from(["", "   ", "\x00", "é" * 30, "long " * 60])
cells = texts | st.none() | st.integers(-5, 5) | st.floats(allow_nan=True) | st.lists(st.integers(), max_size=2)
rows = st.lists(st.dictionaries(st.sampled_from(FIELDS), cells, min_size=0, max_size=5), min_size=0, max_size=8)
good_rows = st.lists(
    st.fixed_dictionaries({"prompt": texts, "chosen": texts, "rejected": texts}), min_size=1, max_size=8
)


@st.composite
def data_files(draw):
    """(suffix, bytes) of a data file: mostly JSONL of generated rows, some CSV and raw bytes."""
    kind = draw(st.sampled_from(["jsonl", "jsonl", "jsonl_good", "csv", "bytes"]))
    if kind == "bytes":
        return ".jsonl", draw(st.binary(max_size=64))
    records = draw(good_rows if kind == "jsonl_good" else rows)
    if kind == "csv":
        lines = ["prompt,chosen,rejected"] + [
            ",".join(str(r.get(k, "")).replace(",", " ").replace("\n", " ") for k in ("prompt", "chosen", "rejected"))
            for r in records
        ]
        return ".csv", "\n".join(lines).encode()
    return ".jsonl", "".join(json.dumps(r) + "\n" for r in records).encode()


@given(
    spec=data_files(),
    num_clients=st.integers(1, 3),
    max_length=st.sampled_from([8, 40, 256]),
    on_overflow=st.sampled_from(["error", "truncate", "drop"]),
)
def test_any_preference_file_is_served_or_refused_in_one_line(spec, num_clients, max_length, on_overflow):
    suffix, data = spec
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"pairs{suffix}"
        path.write_bytes(data)
        try:
            dm = PreferenceDataModule(
                str(path), num_clients=num_clients, max_length=max_length, on_overflow=on_overflow, val_fraction=0.0
            )
            dm.tokenizer = TOKENIZER
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dm.setup("fit")
        except Exception as err:  # noqa: BLE001 - the property: every failure is a user error
            assert_user_error(err, str(path), "data.", "client")
            return
    assert len(dm.clients) == num_clients and all(len(c.full_train) > 0 for c in dm.clients)
    for client in dm.clients:
        for item in client.full_train:
            assert 0 < len(item["chosen_input_ids"]) <= max_length and 0 < len(item["rejected_input_ids"]) <= max_length


def test_a_broken_jsonl_line_prints_only_the_package_error(tmp_path):
    """Issue 34 item 11: ``datasets`` logged "Failed to load JSON from file ..." twice (once with a
    timestamp) before the package's own line; as a process, stderr is that line and the hint."""
    import os

    from lightning_fed.errors import HINT
    from tests.helpers.cli import lightning_fed

    root = Path(__file__).resolve().parents[2]
    path = tmp_path / "pairs.jsonl"
    good = "".join(json.dumps({"prompt": f"p{i}", "chosen": "a", "rejected": "b"}) + "\n" for i in range(4))
    path.write_text(good + '{"prompt": "x", "chosen": \n')
    run = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PYTHONPATH": str(root)}
    env.pop("LIGHTNING_FED_DEBUG", None)
    proc = lightning_fed(
        *["fit", "--config", "configs/tiny.yaml", f"--data.init_args.dataset={path}", "--data.init_args.num_clients=2"],
        *["--data.init_args.val_fraction=0", "--federation.clients_per_round=1", f"--trainer.default_root_dir={run}"],
        cwd=root,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert (
        proc.stderr
        == f"error: data.dataset {str(path)!r}: {str(path)!r}: line 5 is not valid JSON: Expecting value\n{HINT}\n"
    )
    assert not run.exists()
