"""Property: a shipped ``*_tiny`` config with one leaf made the wrong type is refused before torch
in one line naming the key, or passes every check made before torch (issue 41).

A leaf (any value of the config, ``model.init_args.backbone.config.n_layer``,
``data.init_args.synthetic_args.groups[0]``, ``federation.rounds``...) becomes a bool, ``-0.0``,
the word ``'NaN'``, a list, a mapping or ``null``. :func:`~lightning_fed.config_precheck.precheck_arguments`
(what ``lightning-fed fit`` runs before torch is imported, ``lightning_fed/cli.py``) then either
refuses it, as ``UserError`` or ``SystemExit(2)`` with its line written (exit 2 in the CLI), in
one ``error:`` line (a ``tip:`` may follow) naming the leaf's key or the key holding it, or
returns: it cannot tell there (``data.dataset: null``, a value that may be valid), and the live
parser decides after the imports, the escape this property allows where the value may be valid
(a list or a mapping in place of one of ``model:``'s or ``data:``'s scalars never is). Never any other exception
(exit 1 and a traceback in the CLI), and nothing is written in the working folder. Run in this
process, not a child: each example takes milliseconds; ``tests/test_mutated_config_cli.py`` runs
the same refusals through the CLI.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lightning_fed.config_precheck import precheck_arguments
from lightning_fed.errors import UserError
from lightning_fed.shipped_configs import resolve_config

TINY = ("tiny", "fedbis_tiny", "fedbiscuit_tiny", "fedhds_turbo_tiny")
WRONG = (True, False, -0.0, "NaN", [1, 2], {"a": 1}, None)


def _leaves(node: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(node, dict):
        return [leaf for key, value in node.items() for leaf in _leaves(value, (*path, key))]
    if isinstance(node, list):
        return [leaf for i, value in enumerate(node) for leaf in _leaves(value, (*path, i))]
    return [path]


CONFIGS = {name: yaml.safe_load(Path(resolve_config(name)).read_text(encoding="utf-8")) for name in TINY}
LEAVES = [(name, leaf) for name, config in CONFIGS.items() for leaf in _leaves(config)]


def _named(path: tuple) -> list[str]:
    """How a message may name the leaf at ``path``: its key (``init_args`` left out, a list item as
    the list's key) or the key holding it (``model.backbone.config must contain 'model_type'``)."""
    keys = [str(p) for p in path if p != "init_args" and not isinstance(p, int)]
    last_key = max(i for i, p in enumerate(path) if isinstance(p, str))
    if path[last_key] == "class_path" or isinstance(path[-1], int):
        named = [".".join(keys), ".".join(keys[:-1]) or keys[0]]
    else:
        named = [".".join(keys), ".".join(keys[:-1])] if len(keys) > 1 else keys
    if path[:2] == ("federation", "hooks") and len(keys) > 3:  # a hook's option below it: hooks[0].anchor_args.x
        named.append(".".join([f"federation.hooks[{path[2]}]", *keys[2:]]))
    return named


@pytest.mark.parametrize("name", TINY)
def test_every_tiny_config_passes_the_checks_made_before_torch(tmp_path, monkeypatch, name):
    """The property's baseline: unmutated, nothing is refused."""
    monkeypatch.chdir(tmp_path)
    precheck_arguments(["fit", "--config", resolve_config(name)])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=st.sampled_from(LEAVES), wrong=st.sampled_from(WRONG))
def test_a_leaf_of_the_wrong_type_is_refused_in_one_line_naming_it_or_left_to_the_parser(
    tmp_path_factory, capsys, where, wrong
):
    name, path = where
    config = yaml.safe_load(yaml.safe_dump(CONFIGS[name]))
    node = config
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = wrong
    folder = tmp_path_factory.mktemp("run")
    file = folder / f"{name}.yaml"
    file.write_text(yaml.safe_dump(config), encoding="utf-8")
    cwd = folder / "cwd"
    cwd.mkdir()
    before = os.getcwd()
    os.chdir(cwd)
    try:
        precheck_arguments(["fit", "--config", str(file)])
        message = None  # nothing seen before torch: the live parser decides
    except UserError as err:
        message = f"error: {err}\n"
    except SystemExit as err:
        assert err.code == 2
        message = capsys.readouterr().err
    finally:
        os.chdir(before)
    assert list(cwd.iterdir()) == []
    if message is None:  # only where the value may be valid: never a list or a mapping for a scalar
        assert not (path[0] in ("model", "data") and isinstance(wrong, (list, dict))), (name, path, wrong)
        return
    lines = message.splitlines()
    assert lines[0].startswith("error: ") and "Traceback" not in message, message
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("tip: ")), message
    assert any(key in lines[0] for key in _named(path)), (path, wrong, lines[0])
