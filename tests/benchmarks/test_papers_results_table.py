"""docs/results.md's table of the papers' comparisons is what the scripts compute from the runs
in ``benchmarks/papers/results/``: each row's difference, its two error parts, its seed count
and its verdict are read back from the script's ``summarize`` over the committed JSON lines,
never typed by hand (the summaries' arithmetic is checked by hand in
test_papers_summaries.py). A verdict whose figure (a row's first) rests on fewer than 3 seeds must say it is
provisional."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "papers"))

import common  # noqa: E402

RESULTS = ROOT / "benchmarks" / "papers" / "results"
# the script's call at 2 SE -> the docs' verdict
NOT = "not separated"
TO_VERDICT = {
    "fedhds": {"higher": "reproduced", "lower": "reversed"},
    "openfedllm": {"FedIT better": "reproduced", "local better": "reversed"},
    "fedbiot": {"FedBiOT better": "reproduced", "FedOT better": "reversed"},
    "fedpdpo": {"FedPDPO better": "reproduced", "FedDPO better": "reversed"},
    "fedbiscuit": {"FedBiscuit better": "reproduced", "FedBis better": "reversed"},
}
for calls in TO_VERDICT.values():
    calls[NOT] = "not reproduced at this scale"
# docs row (its claim cell starts so) -> script, runs file, summarize kwargs, and per figure the
# summary line that carries it with the (method, baseline) whose common seeds it counts
# (baseline None: a construction value, every seed of the method counts)
ROWS = {
    "FedHDS / FedHDS-Turbo": (
        "fedhds", "fedhds.jsonl", {}, [("| fedhds |", "fedhds", "fedit"), ("| turbo |", "turbo", "fedit")],
    ),
    "Federated instruction tuning": (
        "openfedllm", "openfedllm.jsonl", {},
        [("FedIT minus local, held-out", "fedit", "local"), ("FedIT minus local, own", "fedit", "local")],
    ),
    "FedBiOT's AdapFu": (
        "fedbiot", "fedbiot_bigbench.jsonl", {}, [("FedOT minus FedBiOT, adapfu", "fedbiot", "fedot")],
    ),
    "FedPDPO's personal parts": (
        "fedpdpo", "fedpdpo.jsonl", {"test_rows_per_client": 64}, [("FedPDPO minus 0.500", "fedpdpo", None)],
    ),
    "FedBiscuit's clustered selectors": (
        "fedbiscuit", "fedbiscuit.jsonl", {}, [("FedBiscuit minus 0.500", "fedbiscuit", None)],
    ),
}  # fmt: skip
FIGURES = re.compile(
    r"([+-]\d+\.\d{3}) ± (\d+\.\d{3})(?: nats/token)? \((?:seed SE )?(\d+\.\d{3}), (?:sampling SE )?(\d+\.\d{3})"
)


def docs_row(claim: str) -> list[str]:
    """The cells of docs/results.md's table row whose first cell starts with ``claim``."""
    for line in (ROOT / "docs" / "results.md").read_text().splitlines():
        if line.startswith(f"| {claim}"):
            return [c.strip() for c in line.strip().strip("|").split("|")]
    raise AssertionError(f"no row for {claim!r} in docs/results.md")


def parse(line: str) -> tuple[str, str]:
    """A summary line's figures as the docs write them, and its call (last cell or after ': ')."""
    m = FIGURES.search(line)
    assert m, line
    call = line.strip(" |").split("|")[-1].strip() if line.startswith("|") else line.rsplit(": ", 1)[-1]
    return f"{m[1]} ± {m[2]} (seed {m[3]}, sampling {m[4]}", call


def test_parse_reads_both_forms_of_summary_line():
    assert parse("| fedhds | 0.164 | 0.010 | 4.367 | 2.1% | -0.135 ± 0.060 (0.019, 0.057) | lower |") == (
        "-0.135 ± 0.060 (seed 0.019, sampling 0.057",
        "lower",
    )
    line = "X minus Y, a: +0.256 ± 0.170 nats/token (seed SE 0.165, sampling SE 0.040, 2 seeds): not separated"
    assert parse(line) == (
        "+0.256 ± 0.170 (seed 0.165, sampling 0.040",
        "not separated",
    )  # fmt: skip


@pytest.mark.parametrize("claim", sorted(ROWS))
def test_docs_row_is_what_the_script_computes_from_the_committed_runs(claim):
    script, runs_file, kwargs, figures_lines = ROWS[claim]
    module = pytest.importorskip(script)
    path = RESULTS / runs_file
    cells = docs_row(claim)
    difference, verdict = cells[4], cells[5]
    if not path.exists():
        assert verdict.startswith("**not run**"), f"{claim}: no runs in {path.name}, so the verdict must be 'not run'"
        return
    results = common.read_runs([path])
    lines = module.summarize(results, **kwargs)
    by = common.by_method(results, getattr(module, "label", lambda r: r["method"]))
    for prefix, method, baseline in figures_lines:
        n = len(set(by[method]) & set(by[baseline or method]))
        seeds = f"{n} seed{'s' if n > 1 else ''})"
        figures, call = parse(next(x for x in lines if x.startswith(prefix)))
        assert f"{figures}; {seeds}" in difference, f"{claim}: {figures!r}, {seeds!r} not in {difference!r}"
        assert f"**{TO_VERDICT[script][call]}**" in verdict, f"{claim}: {call!r} is not {verdict!r}"
        if n < 3 and prefix == figures_lines[0][0]:  # the verdict's figure; the bar is 3 seeds
            assert f"provisional: {n} seed" in verdict, f"{claim}: {n} seeds, so the verdict must say provisional"
