"""ClientLevelDP's adaptive ``count_stddev`` refusal names the file the value came from (issue 41).

On 3df2116 the line named the file that made the refusal appear, or none when that was a command-line
option: ``fit --config feddpo_dp --federation.privacy.target_epsilon=0.5`` said ``error:
federation.strategy.adaptive.count_stddev=2 is too small ...`` though ``count_stddev: 2.0`` is
feddpo_dp.yaml's; with ``count_stddev`` unset (its default ``m / 20``) no file either. Now each value the line
holds is followed by the file that set it, ``the command line`` or ``default`` (red team 15 M8; the budget's, its
delta's, rounds' and sample rate's too: config_precheck.with_sources).
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import ROOT, lightning_fed
from tests.helpers.refusals import assert_refused_before_torch

SPLIT = (
    "federation.strategy.adaptive.count_stddev={s} ({stddev_from}) is too small for the client-level noise multiplier"
    " {z} calibrated for federation.privacy.target_epsilon={eps} (the command line) with federation.privacy.delta=1e-05"
    " (default) over {span} (adaptive clipping needs 2 * count_stddev > noise_multiplier): raise count_stddev above"
    " {half}, or lower the noise multiplier (a larger federation.privacy.target_epsilon)"
)
ADAPTIVE = """federation:
  strategy:
    class_path: lightning_fed.privacy.ClientLevelDP
    init_args:
      strategy: FedAvg
      adaptive: {target_quantile: 0.5}
"""


@pytest.mark.parametrize("case", ["given_in_a_file", "default_m_over_20"])
def test_the_count_stddev_line_names_the_file_the_value_came_from(tmp_path, case):
    (tmp_path / "dp.yaml").write_text(ADAPTIVE)
    if case == "given_in_a_file":  # count_stddev: 2.0 in the shipped file, the budget on the command line
        feddpo_dp = str(ROOT / "lightning_fed" / "configs" / "feddpo_dp.yaml")
        configs, epsilon, s, z, half = ["--config", "feddpo_dp"], "0.5", 2, 6.562, 3.281
        span = f"federation.rounds=10 (config {feddpo_dp!r}) at federation.sampling_rate=0.25 (config {feddpo_dp!r})"
        stddev_from = f"config {feddpo_dp!r}"
    else:  # unset: m / 20 = 0.1 (tiny: 2 clients a round, fixed-size sampling by default)
        configs, epsilon, s, z, half = ["--config", "tiny", "--config", "dp.yaml"], "2.0", 0.1, 3.73, 1.865
        tiny = str(ROOT / "lightning_fed" / "configs" / "tiny.yaml")
        span = f"federation.rounds=3 (config {tiny!r}) at sample rate 1 of federation.sampling=fixed_size (default)"
        stddev_from = "default"
    line = SPLIT.format(s=s, stddev_from=stddev_from, z=z, eps=epsilon, span=span, half=half)
    proc = lightning_fed("fit", *configs, f"--federation.privacy.target_epsilon={epsilon}", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (2, f"error: {line}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dp.yaml"]


GIVEN = (
    "federation.strategy.adaptive.count_stddev=0.1 ({small}) is too small for the client-level noise multiplier"
    " federation.privacy.noise_multiplier=1 ({noise}): adaptive clipping needs 2 * count_stddev > noise_multiplier;"
    " raise count_stddev above 0.5, or lower federation.privacy.noise_multiplier"
)
SMALL = """federation:
  strategy:
    class_path: lightning_fed.privacy.ClientLevelDP
    init_args:
      adaptive: {target_quantile: 0.5, learning_rate: 0.2, count_stddev: 0.1}
"""


@pytest.mark.parametrize("noise_from", ["command_line", "another_file", "the_same_file"])
def test_a_given_noise_multiplier_names_count_stddev_s_file_and_its_own(tmp_path, noise_from):
    """Issue 41, M10: ``count_stddev: 0.1`` in a file, the noise multiplier on the command line: on 08c1cba
    the line named no file (it came up only with the command-line option) and advised a larger
    ``target_epsilon`` to a run that gives its noise multiplier. Now each value followed by where it came from
    (red team 15 M8: on f6ad729 the noise multiplier's source was named only when another file), and the option
    to lower; before torch."""
    (tmp_path / "small.yaml").write_text(SMALL)
    (tmp_path / "z.yaml").write_text("federation:\n  privacy: {target_epsilon: null, noise_multiplier: 1.0}\n")
    (tmp_path / "both.yaml").write_text(SMALL + "  privacy: {target_epsilon: null, noise_multiplier: 1.0}\n")
    small = str(tmp_path / ("both.yaml" if noise_from == "the_same_file" else "small.yaml"))
    if noise_from == "command_line":
        args = ["--config", small, "--federation.privacy.target_epsilon=null"]
        args += ["--federation.privacy.noise_multiplier=1.0"]
        noise = "the command line"
    elif noise_from == "another_file":
        args, noise = ["--config", str(tmp_path / "z.yaml"), "--config", small], f"config {str(tmp_path / 'z.yaml')!r}"
    else:
        args, noise = ["--config", small], f"config {small!r}"
    for printed in ([], ["--print_config"]):
        run = tmp_path / f"run{len(printed)}"
        run.mkdir()
        line = GIVEN.format(small=f"config {small!r}", noise=noise)
        assert_refused_before_torch(run, ["fit", "--config", "feddpo_dp", *args, *printed], line)
