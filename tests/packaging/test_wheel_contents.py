"""The built wheel holds every file of the package tree: code, configs, task data, the Flower app.

A file in a folder without ``__init__.py`` (``evaluation/tasks/local_data.py``) or with a suffix
no ``package_data`` pattern names (``deploy/flower_app/pyproject.toml``) was left out of the
wheel while an editable install still found it (issue 33).
"""

from __future__ import annotations

from tests.packaging.wheel import build_wheel, package_tree, wheel_names


def test_the_wheel_holds_every_file_of_the_package_tree(tmp_path):
    names = wheel_names(build_wheel(tmp_path))
    tree = package_tree()
    assert {
        "lightning_fed/evaluation/tasks/local_data.py",
        "lightning_fed/deploy/flower_app/pyproject.toml",
        "lightning_fed/configs/tiny.yaml",
    } <= tree
    assert sorted(tree - names) == []
    assert sorted(n for n in names - tree if not n.startswith("lightning_fed-")) == []
