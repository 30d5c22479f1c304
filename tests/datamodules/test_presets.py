"""FedPDPO's datasets by name (read here from local files shaped like them), the reward-margin
partition, and the one-dataset-per-client setting."""

import json

import datasets
import pytest

from lightning_fed.datamodules import ByKey
from lightning_fed.datamodules.margin import RewardMarginShards
from lightning_fed.datamodules.presets import PRESETS, PresetPreferenceDataModule, cross_domain, load_preset
from lightning_fed.modules.backbone import load_tokenizer


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return str(path)


def imdb_rows(n=6):  # yuasosnin/imdb-dpo: prompt, chosen, rejected, chosen_reward, rejected_reward
    return [
        {
            "prompt": f"Review {i}:",
            "chosen": f"great film {i}",
            "rejected": f"bad film {i}",
            "chosen_reward": float(i),
            "rejected_reward": 0.5,
        }
        for i in range(n)
    ]


def code_rows():  # CyberNative/Code_Vulnerability_Security_DPO: lang, vulnerability, system, question, chosen, rejected
    langs = ["Python", "java", "c++", "php", "Kotlin", "go"]
    return [
        {
            "lang": lang,
            "vulnerability": "CWE-79",
            "system": "You are a coder.",
            "question": f"Write {lang} code.",
            "chosen": "safe()",
            "rejected": "unsafe()",
        }
        for lang in langs
    ]


def webgpt_rows():
    # openai/webgpt_comparisons (card + loading script): question struct, quotes_i, answer_i, tokens_i, score_i
    def row(i, s0, s1):
        q = {"dataset": "eli5", "id": str(i), "full_text": f"Why {i}?"}
        quotes = {"title": ["t"], "extract": ["e"]}
        return {
            "question": q,
            "quotes_0": quotes,
            "answer_0": f"answer A{i}",
            "tokens_0": [1],
            "score_0": s0,
            "quotes_1": quotes,
            "answer_1": f"answer B{i}",
            "tokens_1": [2],
            "score_1": s1,
        }

    return [row(0, 1.0, -1.0), row(1, -0.5, 0.5), row(2, 0.0, 0.0)]


def simple_rows(
    tag, n=4
):  # jondurbin/py-dpo-v0.1 and kaitchup/UltraFeedback-prompt-chosen-rejected: prompt, chosen, rejected (str)
    return [{"prompt": f"{tag} task {i}", "chosen": f"good {tag} {i}", "rejected": f"bad {tag} {i}"} for i in range(n)]


def message_rows(n=3):  # the UltraFeedback-binarized shape: chosen/rejected as chat message lists
    def conv(i, answer):
        return [{"role": "user", "content": f"uf task {i}"}, {"role": "assistant", "content": f"{answer} uf {i}"}]

    return [{"prompt": f"uf task {i}", "chosen": conv(i, "good"), "rejected": conv(i, "bad")} for i in range(n)]


@pytest.fixture
def files(tmp_path):
    return {
        "yuasosnin/imdb-dpo": write_jsonl(tmp_path / "imdb.jsonl", imdb_rows()),
        "CyberNative/Code_Vulnerability_Security_DPO": write_jsonl(tmp_path / "code.jsonl", code_rows()),
        "openai/webgpt_comparisons": write_jsonl(tmp_path / "webgpt.jsonl", webgpt_rows()),
        "jondurbin/py-dpo-v0.1": write_jsonl(tmp_path / "pydpo.jsonl", simple_rows("py")),
        "kaitchup/UltraFeedback-prompt-chosen-rejected": write_jsonl(tmp_path / "uf.jsonl", simple_rows("uf")),
    }


def test_every_preset_loads_into_canonical_fields(files):
    assert set(files) == set(PRESETS)
    for name, path in files.items():
        ds = load_preset(name, path=path)
        assert {"prompt", "chosen", "rejected"} <= set(ds.column_names), name


def test_preparations(files):
    imdb = load_preset("yuasosnin/imdb-dpo", path=files["yuasosnin/imdb-dpo"])
    assert imdb["margin"] == [i - 0.5 for i in range(6)]
    code = load_preset(
        "CyberNative/Code_Vulnerability_Security_DPO", path=files["CyberNative/Code_Vulnerability_Security_DPO"]
    )
    assert code["prompt"][0] == "Write Python code." and code["lang"][0] == "python"
    assert code["lang_group"] == [0, 1, 2, 0, 1, 2]  # web & scripting / enterprise & mobile / systems & HPC
    web = load_preset("openai/webgpt_comparisons", path=files["openai/webgpt_comparisons"])
    assert web.select_columns(["prompt", "chosen", "rejected"]).to_list() == [  # higher score wins; the tie is dropped
        {"prompt": "Why 0?", "chosen": "answer A0", "rejected": "answer B0"},
        {"prompt": "Why 1?", "chosen": "answer B1", "rejected": "answer A1"},
    ]
    assert len(load_preset("jondurbin/py-dpo-v0.1", path=files["jondurbin/py-dpo-v0.1"], max_rows=2)) == 2


def test_ultrafeedback_as_strings_or_chat_messages(tmp_path):
    name = "kaitchup/UltraFeedback-prompt-chosen-rejected"
    plain = load_preset(name, path=write_jsonl(tmp_path / "uf.jsonl", simple_rows("uf", 3)))
    chat = load_preset(name, path=write_jsonl(tmp_path / "uf_chat.jsonl", message_rows()))
    assert plain["chosen"] == chat["chosen"] == ["good uf 0", "good uf 1", "good uf 2"]  # the assistant turn
    assert chat["rejected"][1] == "bad uf 1" and chat["prompt"][2] == "uf task 2"
    with pytest.raises(ValueError, match="expected a string or chat messages, got int"):
        load_preset(name, path=write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "p", "chosen": 3, "rejected": "r"}]))
    with pytest.raises(ValueError, match="data.presets: unknown dataset 'imdb'"):
        load_preset("imdb")


def test_reward_margin_shards_easiest_first(files):
    ds = load_preset("yuasosnin/imdb-dpo", path=files["yuasosnin/imdb-dpo"])
    expected = [[4, 5], [2, 3], [0, 1]]  # margins 4.5, 3.5 | 2.5, 1.5 | 0.5, -0.5
    assert RewardMarginShards(score="margin")(ds, 3, seed=0) == expected
    assert RewardMarginShards(chosen_score="chosen_reward", rejected_score="rejected_reward")(ds, 3, seed=0) == expected
    by_length = RewardMarginShards(scorer=lambda prompt, response: -len(response))  # "great film i" vs "bad film i"
    assert sorted(sum(by_length(ds, 2, seed=0), [])) == list(range(6))
    assert RewardMarginShards(scorer="operator:ne")(ds, 2, seed=0)  # a dotted path also works
    with pytest.raises(ValueError, match="give exactly one of"):
        RewardMarginShards(score="margin", scorer=len)


def test_preset_data_module_intra_and_cross_domain(files):
    tok = load_tokenizer("bytes")
    code = PresetPreferenceDataModule(
        presets=["CyberNative/Code_Vulnerability_Security_DPO"],
        preset_files=files,
        num_clients=3,
        partition=ByKey("lang_group"),
        val_fraction=0.0,
        batch_size=2,
    )
    code.tokenizer = tok
    code.setup("fit")
    assert code.client_sizes == [2, 2, 2] and code.dataset.startswith("preset:")
    names = ["openai/webgpt_comparisons", "jondurbin/py-dpo-v0.1", "kaitchup/UltraFeedback-prompt-chosen-rejected"]
    cross = PresetPreferenceDataModule(presets=names, preset_files=files, num_clients=3, val_fraction=0.0, batch_size=2)
    cross.tokenizer = tok
    cross.setup("fit")
    assert cross.client_sizes == [2, 4, 4]  # one dataset per client
    prompt = tok.decode(cross.client(1).train_set[0]["chosen_input_ids"])
    assert "py task" in prompt
    with pytest.raises(ValueError, match="data.num_clients must be 3 .one per preset."):
        PresetPreferenceDataModule(presets=names, num_clients=2)


def test_cross_domain_marks_client_and_domain():
    a = datasets.Dataset.from_list(simple_rows("a", 2))
    b = datasets.Dataset.from_list(simple_rows("b", 1))
    ds = cross_domain([a, b], ["A", "B"])
    assert ds["client"] == [0, 0, 1] and ds["domain"] == ["A", "A", "B"]
