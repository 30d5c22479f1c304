"""ClientLevelDP's adaptive ``count_stddev`` refusal names the file the value came from (issue 41).

On 3df2116 the line named the file that made the refusal appear, or none when that was a command-line
option: ``fit --config feddpo_dp --federation.privacy.target_epsilon=0.5`` said ``error:
federation.strategy.adaptive.count_stddev=2 is too small ...`` though ``count_stddev: 2.0`` is
feddpo_dp.yaml's; with ``count_stddev`` unset (its default ``m / 20``) no file either. Now the file that
set the value, or for the default the one that set ``adaptive`` (config_precheck._in_file's ``subject``).
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import ROOT, lightning_fed
from tests.helpers.refusals import assert_refused_before_torch

SPLIT = (
    "federation.strategy.adaptive.count_stddev={s} is too small for the client-level noise multiplier {z}"
    " (adaptive clipping needs 2 * count_stddev > noise_multiplier): raise count_stddev above {half}, or lower the"
    " noise multiplier (a larger federation.privacy.target_epsilon)"
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
        configs, epsilon = ["--config", "feddpo_dp"], "0.5"
        named, line = ROOT / "lightning_fed" / "configs" / "feddpo_dp.yaml", SPLIT.format(s=2, z=6.562, half=3.281)
    else:  # unset: m / 20 = 0.1 (tiny: 2 clients a round), from the file that set adaptive
        configs, epsilon = ["--config", "tiny", "--config", "dp.yaml"], "2.0"
        named, line = "dp.yaml", SPLIT.format(s=0.1, z=3.73, half=1.865)
    proc = lightning_fed("fit", *configs, f"--federation.privacy.target_epsilon={epsilon}", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (2, f"error: config {str(named)!r}: {line}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dp.yaml"]


GIVEN = (
    "federation.strategy.adaptive.count_stddev=0.1 is too small for the client-level noise multiplier"
    " (federation.privacy.noise_multiplier=1{where}): adaptive clipping needs 2 * count_stddev > noise_multiplier;"
    " raise count_stddev above 0.5, or lower federation.privacy.noise_multiplier"
)
SMALL = """federation:
  strategy:
    class_path: lightning_fed.privacy.ClientLevelDP
    init_args:
      adaptive: {target_quantile: 0.5, learning_rate: 0.2, count_stddev: 0.1}
"""


@pytest.mark.parametrize("noise_from", ["command_line", "another_file"])
def test_a_given_noise_multiplier_names_count_stddev_s_file_and_its_own(tmp_path, noise_from):
    """Issue 41, M10: ``count_stddev: 0.1`` in a file, the noise multiplier on the command line: on 08c1cba
    the line named no file (it came up only with the command-line option) and advised a larger
    ``target_epsilon`` to a run that gives its noise multiplier. Now the file that set ``count_stddev``, the
    noise multiplier's own file beside it where another, and the option to lower; before torch."""
    (tmp_path / "small.yaml").write_text(SMALL)
    (tmp_path / "z.yaml").write_text("federation:\n  privacy: {target_epsilon: null, noise_multiplier: 1.0}\n")
    small = tmp_path / "small.yaml"
    if noise_from == "command_line":
        args = ["--config", str(small), "--federation.privacy.target_epsilon=null"]
        args += ["--federation.privacy.noise_multiplier=1.0"]
        where = ""
    else:
        args, where = (
            ["--config", str(tmp_path / "z.yaml"), "--config", str(small)],
            f", config {str(tmp_path / 'z.yaml')!r}",
        )
    for printed in ([], ["--print_config"]):
        run = tmp_path / f"run{len(printed)}"
        run.mkdir()
        assert_refused_before_torch(
            run, ["fit", "--config", "feddpo_dp", *args, *printed], GIVEN.format(where=where), config_file=small
        )
