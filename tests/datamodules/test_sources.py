import json

import datasets
import pandas as pd
import pytest

from lightning_fed.datamodules.sources import FIELDS, apply_field_map, load_records, validate_records

ROWS = [
    {"question": f"How was the movie {i}?", "response_j": f"Great {i}.", "response_k": f"Awful {i}.", "id": i}
    for i in range(5)
]
FIELD_MAP = {"prompt": "question", "chosen": "response_j", "rejected": "response_k"}


def _write(path, rows):
    frame = pd.DataFrame(rows)
    if path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    elif path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    return path


@pytest.mark.parametrize("suffix", [".json", ".jsonl", ".csv", ".parquet"])
def test_local_file_with_field_map(tmp_path, suffix):
    path = _write(tmp_path / f"pairs{suffix}", ROWS)
    ds = load_records(str(path), "preference", field_map=FIELD_MAP)
    assert {"prompt", "chosen", "rejected", "id"} <= set(ds.column_names)
    assert "question" not in ds.column_names
    assert ds["prompt"][:] == [r["question"] for r in ROWS]
    assert ds["rejected"][3] == "Awful 3."


def test_local_folder(tmp_path):
    _write(tmp_path / "a.jsonl", ROWS[:2])
    _write(tmp_path / "b.jsonl", ROWS[2:])
    (tmp_path / ".DS_Store").write_text("ignored")
    (tmp_path / "old").mkdir()
    ds = load_records(str(tmp_path), "preference", field_map=FIELD_MAP)
    assert len(ds) == 5
    (tmp_path / "notes.txt").write_text("not ignored")  # red team L5: a folder holds data files
    with pytest.raises(ValueError, match="holds 'notes.txt', a file of unsupported type '.txt'"):
        load_records(str(tmp_path), "preference", field_map=FIELD_MAP)


def test_local_folder_errors(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="no .json"):
        load_records(str(tmp_path), "preference")
    _write(tmp_path / "a.jsonl", ROWS)
    _write(tmp_path / "b.csv", ROWS)
    with pytest.raises(ValueError, match="mixes formats"):
        load_records(str(tmp_path), "preference")


def test_instruction_file_without_mapping(tmp_path):
    rows = [
        {"instruction": "Uppercase.", "input": "a b", "output": "A B"},
        {"instruction": "Say hi.", "input": None, "output": "hi"},
    ]
    ds = load_records(str(_write(tmp_path / "sft.jsonl", rows)), "instruction")
    assert ds["output"][:] == ["A B", "hi"]


def test_missing_local_file(tmp_path):
    path = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_records(str(path), "preference")


def test_synthetic_sets():
    ds = load_records(
        "synthetic:preferences", "preference", synthetic_args={"num_clients": 2, "examples_per_client": 3}
    )
    assert len(ds) == 6 and "client" in ds.column_names and "group" in ds.column_names
    ds = load_records(
        "synthetic:instructions", "instruction", synthetic_args={"num_clients": 2, "examples_per_client": 3}
    )
    assert len(ds) == 6 and "family" in ds.column_names


def test_unknown_synthetic_lists_valid():
    with pytest.raises(ValueError, match="'synthetic:chat'") as info:
        load_records("synthetic:chat", "preference")
    assert "synthetic:preferences" in str(info.value) and "synthetic:instructions" in str(info.value)


def test_unknown_kind():
    with pytest.raises(ValueError, match="'chat'") as info:
        load_records("synthetic:preferences", "chat")
    assert all(kind in str(info.value) for kind in FIELDS)


def test_missing_field_message():
    ds = datasets.Dataset.from_dict({"prompt": ["p"], "answer": ["a"], "rejected": ["r"]})
    with pytest.raises(ValueError) as info:
        validate_records(ds, "preference", "x.jsonl")
    assert str(info.value) == (
        "data.dataset 'x.jsonl': missing field 'chosen' (columns: prompt, answer, rejected; map it with data.field_map)"
    )


@pytest.mark.parametrize("bad", ["", "   \n", None])
def test_empty_value_names_row(bad):
    prompts = ["p"] * 20
    prompts[17] = bad
    ds = datasets.Dataset.from_dict({"prompt": prompts, "chosen": ["c"] * 20, "rejected": ["r"] * 20})
    with pytest.raises(ValueError) as info:
        validate_records(ds, "preference", "x.jsonl")
    what = "no 'prompt' (missing or null)" if bad is None else "an empty 'prompt'"
    assert str(info.value) == f"data.dataset 'x.jsonl': row 17 has {what}"


def test_row_number_follows_shuffled_view():
    ds = datasets.Dataset.from_dict({"instruction": ["i", "", "k"], "output": ["a", "b", "c"]}).select([2, 0, 1])
    with pytest.raises(ValueError, match="row 2 has an empty 'instruction'"):
        validate_records(ds, "instruction", "mem")


def test_non_text_field():
    ds = datasets.Dataset.from_dict({"instruction": ["i"], "output": [3]})
    with pytest.raises(ValueError, match="field 'output' must be text"):
        validate_records(ds, "instruction", "mem")


def test_empty_optional_input_is_fine():
    ds = datasets.Dataset.from_dict({"instruction": ["i", "j"], "input": ["", None], "output": ["a", "b"]})
    validate_records(ds, "instruction", "mem")


def test_field_map_errors():
    ds = datasets.Dataset.from_dict({"question": ["q"], "good": ["g"], "bad": ["b"]})
    with pytest.raises(ValueError, match="'answer' is not a preference field") as info:
        apply_field_map(ds, "preference", "mem", {"answer": "good"})
    assert all(f in str(info.value) for f in ("prompt", "chosen", "rejected"))
    with pytest.raises(ValueError, match="'response_j'") as info:
        apply_field_map(ds, "preference", "mem", {"chosen": "response_j"})
    assert "question, good, bad" in str(info.value)
    with pytest.raises(ValueError, match="both map to column 'good'"):
        apply_field_map(ds, "preference", "mem", {"chosen": "good", "rejected": "good"})


def test_field_map_swap_and_shadow():
    ds = datasets.Dataset.from_dict({"prompt": ["old"], "question": ["q"], "chosen": ["b"], "rejected": ["a"]})
    out = apply_field_map(ds, "preference", "mem", {"prompt": "question", "chosen": "rejected", "rejected": "chosen"})
    assert out[0] == {"prompt": "q", "chosen": "a", "rejected": "b"}


def test_hub_name_goes_to_load_dataset(monkeypatch):
    calls = []

    def fake_load_dataset(name, **kwargs):
        calls.append((name, kwargs))
        return datasets.Dataset.from_dict({"question": ["q"], "response_j": ["a"], "response_k": ["b"]})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    ds = load_records("yuasosnin/imdb-dpo", "preference", split="test", field_map=FIELD_MAP)
    assert calls == [("yuasosnin/imdb-dpo", {"split": "test"})]
    assert ds[0] == {"prompt": "q", "chosen": "a", "rejected": "b"}


@pytest.mark.parametrize("option", ["dataset", "test_dataset"])
def test_a_row_without_a_field_is_one_line_before_torch(tmp_path, option):
    """Red team 11 row 11 (fit_badfile: line 31 of a JSONL file has no ``rejected``; test_badfile: line 2
    of a test set): on c9c04d9 ``row 30 has an empty 'rejected'`` and the ``--debug`` hint; on 628d0d2 one
    line but after torch (12-15 s of CPU) and without the line. Now before torch
    (lightning_fed/data_columns.py blank_row_problem), naming the option, the file, the line and the
    row, saying missing (or null), exit 2, nothing written."""
    from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch

    rows = [{"prompt": "hello there", "chosen": "good", "rejected": "bad"}] * 40
    rows[30] = {"prompt": "hello there", "chosen": "good"}
    data = tmp_path / "fit_data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = ["--data.init_args.synthetic_args=null"] if option == "dataset" else []
    proc = lightning_fed_without_torch(
        "fit",
        "--config",
        "tiny",
        f"--data.init_args.{option}={data}",
        *source,
        f"--trainer.default_root_dir={tmp_path / 'run'}",
        cwd=tmp_path,
        hook=tmp_path / "hook",
    )
    assert REACHED_TORCH not in proc.stderr
    line = f"error: data.{option} {str(data)!r}: line 31 (row 30) has no 'rejected' (missing or null)\n"
    assert (proc.returncode, proc.stderr) == (2, line)
    assert not (tmp_path / "run").exists()


def test_a_csv_row_with_an_empty_cell_is_one_line_before_torch(tmp_path):
    """The same for a CSV file (an empty cell is pandas' NA: missing or null), named by its row only (a
    quoted cell may span lines). On 628d0d2 refused only after torch."""
    from tests.helpers.cli import REACHED_TORCH, lightning_fed_without_torch

    rows = ["hello there,good,bad"] * 40
    rows[30] = "hello there,good,"
    data = tmp_path / "fit_data.csv"
    data.write_text("prompt,chosen,rejected\n" + "".join(r + "\n" for r in rows))
    proc = lightning_fed_without_torch(
        "fit",
        "--config",
        "tiny",
        f"--data.init_args.dataset={data}",
        "--data.init_args.synthetic_args=null",
        f"--trainer.default_root_dir={tmp_path / 'run'}",
        cwd=tmp_path,
        hook=tmp_path / "hook",
    )
    assert REACHED_TORCH not in proc.stderr
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: data.dataset {str(data)!r}: row 30 has no 'rejected' (missing or null)\n",
    )
    assert not (tmp_path / "run").exists()


def test_the_live_check_names_the_line_of_a_json_lines_row(tmp_path):
    """The same line after the imports (a data module of the user's reading the file via load_records)."""
    data = tmp_path / "d.jsonl"
    data.write_text(
        '{"prompt": "p", "chosen": "c", "rejected": "r"}\n\n{"prompt": "p", "chosen": " ", "rejected": "r"}\n'
    )
    with pytest.raises(ValueError) as info:
        load_records(str(data), "preference")
    assert str(info.value) == f"data.dataset {str(data)!r}: line 3 (row 1) has an empty 'chosen'"
