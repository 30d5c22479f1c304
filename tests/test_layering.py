"""The package's layering: each package imports only those below it (docs/developer/architecture.md).

The graph is ``tests/test_import_graph.py``'s (every module read with ``ast``; imports at module
level, inside functions and under ``if TYPE_CHECKING:`` all count), folded to the package's
units: a subpackage (``federation``) or a top-level module (``run_parser``). An edge from a
unit to one in a higher layer is an upward arrow; each one left is listed in
:data:`UPWARD` with the reason it is still there, and the test fails on a new one and on one
that is gone (so the list only shrinks). Without those arrows the units' graph has no circle.
"""

from __future__ import annotations

from tests.test_import_graph import find_cycle, import_graph

LAYERS: list[set[str]] = [
    # 0: plain data and process plumbing, no package below them
    {
        "limits",
        "data_paths",
        "path_kinds",
        "data_cross_rules",
        "data_files",
        "column_types",
        "transformers_configs",
        "model_sources",
        "allocator",
        "adapter_config",
        "option_rules",
        "hook_rules",
        "value_rules",
        "class_locations",
        "class_parameters",
        "config_merging",
        "run_options",
        "run_config",
        "federation_rules",
        "stage_sets",
        "config_changes",
        "yaml_reading",
        "state",
        "console",
        "plugins",
        "startup",
        "help_pages",
        "trainer_options",
        "loop_conflicts",
        "trainer_classes",
        "lightning_init_args",
        "lightning_refused_values",
        "accelerator_builds",
        "class_paths",
        "class_kinds",
        "option_types",
        "strategy_modules",
        "dp_sgd_rules",
        "loss_options",
        "strict_parser",
        "json_lines",
        "read_errors",
        "lightning_fed",
    },
    # 1: pure tensor code
    {"strategies"},
    # 2: one-line errors (they name the registry's strategies) and what raises them without torch;
    # the compressed uplink
    {
        "errors",
        "compression",
        "config_precheck",
        "config_values",
        "class_options",
        "class_help",
        "class_path_shapes",
        "nested_options",
        "class_sections",
        "hook_cross_rules",
        "data_columns",
        "partition_values",
        "held_out_rules",
        "wrapper_rules",
        "noise_calibration",
        "private_run_rules",
        "resume_precheck",
        "model_packages",
        "shipped_configs",
        "top_level",
    },
    # 3: the engine
    {"federation"},
    # 4: what serves and batches a round's clients
    {"datamodules", "batching"},
    # 5: the local objectives
    {"modules"},
    # 6: what runs around the objectives
    {"evaluation", "privacy", "heterogeneity", "selection", "round_hooks", "pipelines", "planning"},
    # 7: the run as data (its object fields' types are the packages below)
    {"run"},
    # 8: what builds a run and what runs it
    {"run_checks", "run_factory", "callbacks"},
    # 9: the one reader of a config, and the commands that read one
    {"run_parser", "plan_cli", "report"},
    # 10: the Flower apps (they read a config through run_parser)
    {"deploy"},
    # 11: the processes
    {"federated_cli", "cli", "process", "__main__"},
]

UPWARD = {
    ("modules", "evaluation"): "modules.base's test_step and fedbiot's ROUGE/generation (issue 42 item 3)",
}
"""The upward arrows left, each with why: the list may only shrink."""


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def unit_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, targets in import_graph().items():
        edges = graph.setdefault(_unit(module), set())
        edges.update(_unit(t) for t in targets if _unit(t) != _unit(module))
    return graph


def _layer() -> dict[str, int]:
    return {unit: i for i, units in enumerate(LAYERS) for unit in units}


def test_every_unit_has_a_layer():
    layer = _layer()
    assert sum(len(u) for u in LAYERS) == len(layer), "a unit is in two layers"
    assert sorted(set(unit_graph()) - set(layer)) == [], "place the new unit in LAYERS"


def test_upward_arrows_are_only_the_listed_ones():
    layer = _layer()
    upward = {(a, b) for a, targets in unit_graph().items() for b in targets if layer[b] > layer[a]}
    assert upward == set(UPWARD), (
        f"new: {sorted(upward - set(UPWARD))}, gone (drop them): {sorted(set(UPWARD) - upward)}"
    )
    assert len(UPWARD) <= 1


def test_no_circle_between_packages_but_the_listed_arrows():
    graph = {a: {b for b in targets if (a, b) not in UPWARD} for a, targets in unit_graph().items()}
    cycle = find_cycle(graph)
    assert cycle is None, "circle between packages: " + " -> ".join(cycle)
