"""docs/results.md's table of the papers' comparisons is what the scripts compute from the runs
in ``benchmarks/papers/results/``, cell by cell:

* each figure (difference ± error, its seed and sampling parts, clusters, seeds, k SE, df, t)
  is the script's ``summarize`` line, verbatim and in order, in the difference cell;
* each verdict is tied to its own figure: the i-th bold verdict of the verdict cell is the
  i-th figure's call, followed by that figure's "k SE";
* every decimal number of the baseline, method, difference and verdict cells is one the
  ``--summarize`` command prints (so a typed value, a per-seed list or a ratio cannot drift);
* the setting cell's numbers of this scale are the recorded runs' arguments (or, where the runs
  record none, the script's defaults and config).

A verdict whose first figure rests on fewer than 3 seeds must say it is provisional. The
summaries' arithmetic is checked by hand in test_papers_summaries.py and
test_papers_error_model.py."""

import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "papers"))

import common  # noqa: E402
import fedbiot  # noqa: E402
import fedbiscuit  # noqa: E402
import fedhds  # noqa: E402
import fedpdpo  # noqa: E402
import openfedllm  # noqa: E402

RESULTS = ROOT / "benchmarks" / "papers" / "results"
NOT = "not separated"
# docs row (its claim cell starts so) -> module, runs file, summarize kwargs, the prefixes of its
# figure lines in order, and the script's calls -> the docs' verdicts
ROWS = {
    "FedHDS / FedHDS-Turbo": (
        fedhds, "fedhds.jsonl", {}, ["| fedhds |", "| turbo |"], {"higher": "reproduced", "lower": "reversed"},
    ),
    "Federated instruction tuning": (
        openfedllm, "openfedllm.jsonl", {}, ["FedIT minus local, held-out", "FedIT minus local, own"],
        {"FedIT better": "reproduced", "local better": "reversed"},
    ),
    "FedBiOT's AdapFu": (
        fedbiot, "fedbiot_bigbench.jsonl", {}, ["FedOT minus FedBiOT, adapfu"],
        {"FedBiOT better": "reproduced", "FedOT better": "reversed"},
    ),
    "FedPDPO's personal parts": (
        fedpdpo, "fedpdpo_pairs.jsonl", {"test_rows_per_client": 64}, ["FedPDPO minus FedDPO, per pair"],
        {"FedPDPO better": "reproduced", "FedDPO better": "reversed"},
    ),
    "FedBiscuit's clustered selectors": (
        fedbiscuit, "fedbiscuit.jsonl", {}, ["FedBiscuit minus 0.500"],
        {"FedBiscuit better": "reproduced", "FedBis better": "reversed"},
    ),
}  # fmt: skip
FIGURE = re.compile(r"[+-]\d+\.\d{3} ± \d+\.\d{3}.*?; \d+\.\d SE, df \d+\.\d, t \d+\.\d{2}\)")
VERDICT = re.compile(r"\*\*(reproduced|reversed|not reproduced at this scale)\*\*[^(]*\((\d+\.\d) SE")
NUMBER = re.compile(r"\d+\.\d+")


def docs_row(claim: str, text: str | None = None) -> list[str]:
    """The cells of docs/results.md's table row whose first cell starts with ``claim``."""
    text = (ROOT / "docs" / "results.md").read_text() if text is None else text
    for line in text.splitlines():
        if line.startswith(f"| {claim}"):
            return [c.strip() for c in line.strip().strip("|").split("|")]
    raise AssertionError(f"no row for {claim!r} in docs/results.md")


def summary(claim: str) -> tuple[list[str], list]:
    module, runs_file, kwargs, _, _ = ROWS[claim]
    runs = common.read_runs([RESULTS / runs_file])
    return module.summarize(runs, **kwargs), runs


def args_of(runs: list[dict], *keys: str) -> tuple:
    """The recorded runs' value of each key (all runs must agree)."""
    values = {tuple(r["args"][k] for k in keys) for r in runs}
    assert len(values) == 1, f"the runs disagree on {keys}: {values}"
    return next(iter(values))


def defaults(main) -> dict:
    """A script's argparse defaults (its ``main`` parser, read without running it)."""
    import argparse

    seen = {}
    real = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args

    def grab(self, *a, **k):
        seen.update(vars(real[1](self, [])[0]))
        raise SystemExit

    argparse.ArgumentParser.parse_args = argparse.ArgumentParser.parse_known_args = grab
    try:
        main()
    except SystemExit:
        pass
    finally:
        argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = real
    return seen


def settings(claim: str, runs: list[dict]) -> list[tuple[str, tuple]]:
    """(pattern of the setting cell, the values its groups must read) for this scale."""
    if claim.startswith("FedHDS"):
        c, pc, r, cpr, b, h, t = args_of(
            runs, "clients", "per_client", "rounds", "clients_per_round", "batch_size", "held_out", "test_per_task"
        )
        return [
            (r"(\d+) BIG-bench tasks as clients \((\d+) rows each\), (\d+) rounds x (\d+) clients, batch (\d+)",
             (c, pc, r, cpr, b)),
            (r"ROUGE-L on (\d+) prompts of (\d+) held-out tasks \((\d+) each\)", (h * t, h, t)),
        ]  # fmt: skip
    if claim.startswith("Federated"):
        c, pc, r, b, h, t, o = args_of(
            runs, "clients", "per_client", "rounds", "batch_size", "held_out", "test_per_task", "own_test"
        )
        return [
            (r"(\d+) BIG-bench tasks as clients \((\d+) rows each\), (\d+) rounds of one epoch, batch (\d+)",
             (c, pc, r, b)),
            (r"(\d+) prompts of (\d+) held-out tasks \((\d+) each\) and (\d+) unseen rows", (h * t, h, t, c * o)),
        ]  # fmt: skip
    if claim.startswith("FedBiOT"):  # the runs record no args: the script's defaults ran
        d, bench = defaults(fedbiot.main), fedbiot.bench_args(fedbiot.argparse.Namespace(**defaults(fedbiot.main)), [])
        rows = len(runs[0]["final"]["adapfu_loss"])
        return [
            (r"(\d+) BIG-bench tasks as clients \((\d+) \+ (\d+) held-out rows each\), public set (\d+) other tasks",
             (d["clients"], d["per_client"], d["held_per_client"], d["public_tasks"])),
            (r"(\d+) rounds x (\d+) clients x (\d+) SGD steps, (\d+) held-out rows",
             (bench.rounds, bench.clients_per_round, bench.local_steps, rows)),
        ]  # fmt: skip
    if claim.startswith("FedPDPO"):  # the recorded command: each method's config, as the runs' command says
        assert all(f"configs/real_text_{r['method']}.yaml" in r["command"] for r in runs)
        feds = {m: yaml.safe_load((ROOT / "configs" / f"real_text_{m}.yaml").read_text())["federation"] for m in
                {r["method"] for r in runs}}  # fmt: skip
        keys = ("rounds", "local_steps")
        assert len({tuple(f[k] for k in keys) for f in feds.values()}) == 1, f"the methods' configs differ: {feds}"
        fed = feds["fedpdpo"]
        users = len({c for r in runs for c in r["final"]["clients"]})
        return [
            (r"(\d+) users in two opposite groups, (\d+) rounds x (\d+) clients x (\d+) steps",
             (users, fed["rounds"], users, fed["local_steps"])),
            (r"the same (\d+) held-out pairs for every user, (\d+) rows", (64, 64 * users)),
        ]  # fmt: skip
    d = defaults(fedbiscuit.main)  # FedBiscuit: the runs record no args: the script's defaults ran
    users = len(fedbiscuit.USERS)
    assert all(len(r["acc"][u]) == d["test_pairs"] for r in runs for u in fedbiscuit.USERS)
    return [
        (r"(\d+) users in two opposite groups, (\d+) rounds x (\d+) clients x (\d+) steps, "
         r"(\d+) test pairs x (\d+) users",
         (users, d["rounds"], users, d["local_steps"], d["test_pairs"], users)),
    ]  # fmt: skip


def check_row(claim: str, text: str | None = None) -> None:
    module, _, _, prefixes, to_verdict = ROWS[claim]
    lines, runs = summary(claim)
    cells = docs_row(claim, text)
    setting, baseline, method, difference, verdict = cells[1:6]
    # 1. each figure verbatim, in order, in the difference cell
    figures, calls = [], []
    for prefix in prefixes:
        line = next(x for x in lines if x.startswith(prefix))
        figures.append(FIGURE.search(line)[0])
        calls.append(line.strip(" |").split("|")[-1].strip() if line.startswith("|") else line.rsplit(": ", 1)[-1])
    at = [difference.find(f) for f in figures]
    assert -1 not in at and at == sorted(at), f"{claim}: {figures} not in order in {difference!r}"
    # 2. the i-th verdict is the i-th figure's call, with its own k SE
    expected = [
        (to_verdict.get(c, "not reproduced at this scale"), FIGURE.search(f)[0]) for c, f in zip(calls, figures)
    ]
    expected = [(v, re.search(r"; (\d+\.\d) SE", f)[1]) for v, f in expected]
    assert VERDICT.findall(verdict) == expected, f"{claim}: verdicts {VERDICT.findall(verdict)} != {expected}"
    n = int(re.search(r"(\d+) seeds?;", figures[0])[1])
    if n < 3:
        assert f"provisional: {n} seed" in verdict, f"{claim}: {n} seeds, so the verdict must say provisional"
    # 3. every decimal number of the figure cells is printed by the command
    printed = set(NUMBER.findall("\n".join(lines)))
    for name, cell in (("baseline", baseline), ("method", method), ("difference", difference), ("verdict", verdict)):
        for x in NUMBER.findall(cell):
            assert x in printed, f"{claim}: {name} cell's {x} is not printed by its --summarize"
    # 4. the setting of this scale is the runs'
    here = setting.split("(paper")[0]
    for pattern, values in settings(claim, runs):
        m = re.search(pattern, here)
        assert m, f"{claim}: no {pattern!r} in the setting {here!r}"
        assert tuple(int(g) for g in m.groups()) == tuple(values), f"{claim}: setting {m[0]!r}, runs {values}"


@pytest.mark.parametrize("claim", sorted(ROWS))
def test_docs_row_is_what_the_script_computes_from_the_committed_runs(claim):
    check_row(claim)


def test_every_row_of_the_table_is_checked():
    text = (ROOT / "docs" / "results.md").read_text()
    table = text.split("## The papers' headline claims")[1].split("\n## ")[0]
    rows = [x for x in table.splitlines() if x.startswith("| ") and not x.startswith(("| Paper's claim", "|---"))]
    assert len(rows) == len(ROWS) and all(any(r.startswith(f"| {c}") for c in ROWS) for r in rows)


# An outside reviewer's one-line mutations of the table (a typed figure, a swapped verdict, a
# per-seed list, a "k SE", a setting, a number in the why text): each must fail the check.
MUTATIONS = {
    "baseline figure": ("FedIT 0.299 (seed SD 0.031", "FedIT 0.999 (seed SD 0.031"),
    "method figure": ("FedBiOT 0.963 (seed SD", "FedBiOT 0.463 (seed SD"),
    "method values": ("FedIT 2.586 and 1.425", "FedIT 3.586 and 1.425"),
    "verdict of a decided figure": (
        "**reproduced** on held-out tasks (8.5 SE",
        "**not reproduced at this scale** on held-out tasks (8.5 SE",
    ),
    "verdict of an undecided figure": (
        "own task **not reproduced at this scale** (1.5 SE",
        "own task **reproduced** (1.5 SE",
    ),
    "k SE": ("(3.4 SE > t 2.13", "(4.6 SE > t 2.13"),
    "per-seed list": ("seeds 0-2: 0.535, 0.492, 0.549", "seeds 0-2: 0.635, 0.392, 0.549"),
    "setting": ("2 rounds x 3 clients, batch 1", "40 rounds x 3 clients, batch 1"),
    "a figure in the why text": ("+0.008 ± 0.008 (1.1 SE)", "+0.108 ± 0.008 (1.1 SE)"),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_a_one_line_mutation_of_the_table_fails(name):
    text = (ROOT / "docs" / "results.md").read_text()
    old, new = MUTATIONS[name]
    assert text.count(old) == 1, f"the mutation's text {old!r} is not in the table once"
    mutated = text.replace(old, new)
    failed = []
    for claim in ROWS:
        try:
            check_row(claim, mutated)
        except AssertionError:
            failed.append(claim)
    assert failed, f"{name}: the mutated table passes"
