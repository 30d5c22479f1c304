"""``model.cache_reference=true`` in a private run names each option's own file (issue 41).

On 3df2116, with the cache in one file and ClientLevelDP in another (``--config a.yaml --config
b.yaml``, in either order), the line named the file that came last for both options: ``error: config
'b.yaml': model.cache_reference=true in a private run (federation.strategy has
lightning_fed.privacy.ClientLevelDP): ...``, though ``cache_reference`` is a.yaml's.
"""

from __future__ import annotations

import pytest

from tests.helpers.cli import lightning_fed_without_torch

CACHE = "model:\n  init_args:\n    cache_reference: true\n"
CLIENT_DP = (
    "federation:\n  strategy:\n    class_path: lightning_fed.privacy.ClientLevelDP\n"
    "    init_args: {strategy: FedAvg, noise_multiplier: 1.0}\n"
)
LINE = (
    "config 'a.yaml': model.cache_reference=true in a private run (federation.strategy has"
    " lightning_fed.privacy.ClientLevelDP, config 'b.yaml'): the cache would record which examples were trained on"
    " in the checkpoint; set model.cache_reference=false (or leave it unset)"
)


@pytest.mark.parametrize("order", [["a.yaml", "b.yaml"], ["b.yaml", "a.yaml"]], ids=["cache_first", "dp_first"])
def test_each_option_of_the_cache_line_names_its_own_file(tmp_path, order):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "a.yaml").write_text(CACHE)
    (cwd / "b.yaml").write_text(CLIENT_DP)
    configs = [a for name in order for a in ("--config", name)]
    proc = lightning_fed_without_torch("fit", "--config", "tiny", *configs, cwd=cwd, hook=tmp_path / "h")
    assert (proc.returncode, proc.stderr) == (2, f"error: {LINE}\n")
    assert sorted(p.name for p in cwd.iterdir()) == ["a.yaml", "b.yaml"]
