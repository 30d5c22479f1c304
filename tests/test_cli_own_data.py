"""What the own-data example shows, as docs/get-started/own-data.md ("What to expect") says.

The example's users have opposite tastes on the same questions (ana and chen prefer the short
answer, ben and dara the detailed one), so one global model cannot follow both, and ``pref_acc``
(summed log-probabilities) is decided by the answers' lengths. Checked with a tiny randomly
initialised GPT-2 in place of SmolLM2 (seconds instead of many minutes on a CPU); the guide quotes
the SmolLM2 numbers, which show the same pattern.
"""

from __future__ import annotations

import json

from tests.helpers.cli import lightning_fed

TINY = {
    "name_or_path": None,
    "config": {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2},
    "tokenizer": "bytes",
}
SHORT, DETAILED = (0, 2), (1, 3)  # ana, chen | ben, dara: ByKey numbers the users in sorted order


def test_the_own_data_example_splits_by_taste_and_pref_acc_follows_length(tmp_path):
    from lightning_fed.federation.client_metrics import read_client_metrics

    proc = lightning_fed(
        *["fit", "--config", "own_data", f"--trainer.default_root_dir={tmp_path}"],
        *[f"--trainer.logger.init_args.save_dir={tmp_path}", "--trainer.enable_progress_bar=false"],
        *["--federation.rounds=2", f"--model.init_args.backbone={json.dumps(TINY)}", "--data.init_args.template=plain"],
        *["--data.init_args.system_prompt=null", "--model.init_args.lr=0.005"],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = (tmp_path / "feddpo").iterdir()
    assert json.loads((run / "rounds.jsonl").read_text().splitlines()[0])["clients"] == list(DETAILED)
    val = read_client_metrics(run, "val").to_pandas().set_index(["round", "client"])
    # pref_acc: the short answer has the higher summed log-probability, before and after training
    for r in (0, 1, 2):
        assert [val.loc[(r, c), "pref_acc"] for c in range(4)] == [1.0, 0.0, 1.0, 0.0]
    # round 1 trained ben and dara: the model follows their taste, and ana and chen lose theirs
    assert all(val.loc[(1, c), "reward_acc"] == 1.0 and val.loc[(1, c), "loss"] < 0.5 for c in DETAILED)
    assert all(val.loc[(1, c), "reward_acc"] == 0.0 and val.loc[(1, c), "loss"] > 1.0 for c in SHORT)
    assert val.loc[1, "loss"].mean() > 0.693  # the mean over the four users rises above log 2
