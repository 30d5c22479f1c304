"""BIG-bench JSON tasks as instruction records, and the held-out-task split (FedHDS's setting)."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from lightning_fed.datamodules.bigbench import held_out_split, load_bigbench, main, task_records

GEN = {
    "description": "Sort a list of words",
    "task_prefix": "Sort the following words alphabetically.\n",
    "examples": [{"input": "b a", "target": "a b"}, {"input": "d c", "target": ["c d", "other"]}, {"input": "x"}],
}
MC = {
    "description": "Pick the odd word out",
    "examples": [
        {"input": "cat dog car", "target_scores": {"cat": 0, "car": 1, "dog": 0}},
        {"input": "one two three four five six", "target_scores": {"six": 1, "two": 0}},
    ],
}
NO_APPEND = {**MC, "append_choices_to_input": False}


def write_tasks(root, tasks: dict[str, dict]) -> None:
    for name, task in tasks.items():
        (root / name).mkdir(parents=True)
        (root / name / "task.json").write_text(json.dumps(task))


def test_generative_and_multiple_choice_examples_become_instruction_records():
    gen = task_records(GEN, "word_sorting")
    assert gen == [
        {
            "instruction": "Sort the following words alphabetically.",
            "input": "b a",
            "output": "a b",
            "task": "word_sorting",
        },
        {
            "instruction": "Sort the following words alphabetically.",
            "input": "d c",
            "output": "c d",
            "task": "word_sorting",
        },
    ]  # the task_prefix is the instruction; the first of several targets; an example without one is skipped
    mc = task_records(MC, "odd_one_out")
    assert mc[0] == {
        "instruction": "Pick the odd word out",
        "input": "cat dog car\nOptions: cat | car | dog",
        "output": "car",
        "task": "odd_one_out",
    }
    assert task_records(NO_APPEND, "t")[0]["input"] == "cat dog car"


def test_folder_and_sdist_give_the_same_records(tmp_path):
    tasks = tmp_path / "bigbench-1.0.0" / "bigbench" / "benchmark_tasks"
    write_tasks(tasks, {"word_sorting": GEN, "odd_one_out": MC})
    (tasks / "odd_one_out" / "variant").mkdir()  # a subtask folder is not a top-level task
    (tasks / "odd_one_out" / "variant" / "task.json").write_text(json.dumps(GEN))
    archive = tmp_path / "bigbench-1.0.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "bigbench-1.0.0", arcname="bigbench-1.0.0")
        data = b"not a task"
        info = tarfile.TarInfo("bigbench-1.0.0/bigbench/README.md")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    from_folder = load_bigbench(tmp_path / "bigbench-1.0.0")
    assert from_folder == load_bigbench(archive) == load_bigbench(tasks)
    assert [r["task"] for r in from_folder] == ["odd_one_out"] * 2 + ["word_sorting"] * 2  # sorted by task


def test_filters_subsets_and_named_tasks(tmp_path):
    write_tasks(tmp_path, {"word_sorting": GEN, "odd_one_out": MC})
    short = load_bigbench(tmp_path, max_input_words=9)
    assert [r["input"].split("\n")[0] for r in short] == ["cat dog car", "b a", "d c"]
    assert {r["task"] for r in load_bigbench(tmp_path, min_per_task=2, max_input_words=9)} == {"word_sorting"}
    one = load_bigbench(tmp_path, max_per_task=1, seed=3)
    assert len(one) == 2 and one == load_bigbench(tmp_path, max_per_task=1, seed=3)
    assert load_bigbench(tmp_path, tasks=["odd_one_out"]) == task_records(MC, "odd_one_out")
    with pytest.raises(ValueError, match=r"not found.*\['nope'\]"):
        load_bigbench(tmp_path, tasks=["nope"])
    with pytest.raises(ValueError, match="does not exist"):
        load_bigbench(tmp_path / "missing")


def test_held_out_split_keeps_every_task_on_one_side():
    records = [{"instruction": "i", "input": str(k), "output": "o", "task": f"t{k % 5}"} for k in range(40)]
    train, test = held_out_split(records, 2, seed=1)
    train_tasks, test_tasks = {r["task"] for r in train}, {r["task"] for r in test}
    assert len(test_tasks) == 2 and len(train_tasks) == 3 and not train_tasks & test_tasks
    assert len(train) + len(test) == 40
    assert held_out_split(records, 2, seed=1) == (train, test)
    with pytest.raises(ValueError, match=r"`num_held_out` must be in \[1, 4\]"):
        held_out_split(records, 5)


def test_command_line_writes_train_and_test_files(tmp_path, capsys):
    write_tasks(tmp_path / "src", {"word_sorting": GEN, "odd_one_out": MC, "other": GEN})
    main([str(tmp_path / "src"), str(tmp_path / "out"), "--held-out", "1", "--min-per-task", "2"])
    train = [json.loads(line) for line in (tmp_path / "out" / "train.jsonl").read_text().splitlines()]
    test = [json.loads(line) for line in (tmp_path / "out" / "test.jsonl").read_text().splitlines()]
    assert len({r["task"] for r in train}) == 2 and len({r["task"] for r in test}) == 1
    assert "2 training tasks (4 rows), 1 held-out tasks (2 rows)" in capsys.readouterr().out
