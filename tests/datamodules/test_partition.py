import datasets
import numpy as np
import pytest

from lightning_fed.data_cross_rules import grouped_keys_line
from lightning_fed.datamodules.partition import (
    IID,
    PARTITIONERS,
    ByColumn,
    ByKey,
    Dirichlet,
    Partitioner,
    SortedShards,
    check_partition,
)
from lightning_fed.datamodules.synthetic import planted_preferences


def _labelled(n: int = 2000, labels: int = 10, seed: int = 0) -> datasets.Dataset:
    rng = np.random.default_rng(seed)
    return datasets.Dataset.from_dict(
        {"label": rng.integers(labels, size=n).tolist(), "score": rng.normal(size=n).tolist()}
    )


def _assert_valid(parts, n, num_clients):
    assert len(parts) == num_clients
    assert all(len(p) > 0 for p in parts)
    assert all(p == sorted(p) for p in parts)
    flat = [i for p in parts for i in p]
    assert sorted(flat) == list(range(n))  # disjoint and covering


def test_registry():
    assert PARTITIONERS == {
        "iid": IID,
        "dirichlet": Dirichlet,
        "by_key": ByKey,
        "sorted_shards": SortedShards,
        "by_column": ByColumn,
    }
    assert all(issubclass(cls, Partitioner) for cls in PARTITIONERS.values())


@pytest.mark.parametrize(
    "partitioner", [IID(), Dirichlet(alpha=0.5, key="label"), ByKey("label"), SortedShards("score")]
)
def test_partition_properties_and_determinism(partitioner):
    ds = _labelled()
    parts = partitioner(ds, 5, seed=1)
    _assert_valid(parts, len(ds), 5)
    assert partitioner(ds, 5, seed=1) == parts


@pytest.mark.parametrize("partitioner", [IID(), Dirichlet(alpha=0.5, key="label")])
def test_seed_changes_random_partitions(partitioner):
    ds = _labelled()
    assert partitioner(ds, 5, seed=1) != partitioner(ds, 5, seed=2)


def test_iid_sizes_differ_by_at_most_one():
    sizes = [len(p) for p in IID()(_labelled(n=103), 10, seed=0)]
    assert max(sizes) - min(sizes) <= 1


def _skew(ds, parts, labels=10):
    """Mean total-variation distance between client label distributions and the global one."""
    y = np.asarray(ds["label"][:])
    overall = np.bincount(y, minlength=labels) / len(y)
    return np.mean([0.5 * np.abs(np.bincount(y[p], minlength=labels) / len(p) - overall).sum() for p in parts])


def test_dirichlet_small_alpha_is_skewed_large_alpha_near_uniform():
    ds = _labelled()
    skewed = _skew(ds, Dirichlet(alpha=0.05, key="label")(ds, 5, seed=0))
    uniform = _skew(ds, Dirichlet(alpha=1000.0, key="label")(ds, 5, seed=0))
    assert skewed > 0.5
    assert uniform < 0.05


def test_dirichlet_min_size():
    ds = _labelled(n=400)
    parts = Dirichlet(alpha=0.3, key="label", min_size=20)(ds, 8, seed=0)
    assert min(len(p) for p in parts) >= 20


def test_dirichlet_unsatisfiable_min_size():
    with pytest.raises(ValueError, match="cannot give 10 clients"):
        Dirichlet(alpha=1.0, key="label", min_size=50)(_labelled(n=100), 10, seed=0)
    with pytest.raises(ValueError, match="no draw in 3"):
        Dirichlet(alpha=0.01, key="label", min_size=40, max_attempts=3)(_labelled(n=400, labels=2), 8, seed=0)


@pytest.mark.parametrize("alpha", [0, -1.0, float("nan")])
def test_dirichlet_bad_alpha(alpha):
    with pytest.raises(ValueError, match="alpha"):
        Dirichlet(alpha=alpha, key="label")


def test_by_key_groups_values():
    ds = datasets.Dataset.from_dict({"author": ["c", "a", "b", "a", "c", "d", "b"]})
    parts = ByKey("author")(ds, 4, seed=0)
    assert parts == [[1, 3], [2, 6], [0, 4], [5]]  # sorted values a, b, c, d
    merged = ByKey("author")(ds, 2, seed=0)  # round-robin: a,c -> 0; b,d -> 1
    assert merged == [[0, 1, 3, 4], [2, 5, 6]]
    # the values each client holds, as the partition assigned its rows (the setup warning's, red team 17 B20)
    assert ByKey("author").groups(ds, 2) == [["a", "c"], ["b", "d"]]
    assert ByKey("author").groups(ds, 4) == [["a"], ["b"], ["c"], ["d"]]


def test_grouped_keys_line_names_the_first_clients_values_and_none_when_private():
    groups = [[f"u{i:02d}" for i in range(c, 20, 5)] for c in range(5)]
    line = grouped_keys_line("user", "t.csv", groups)
    assert line == (
        "data.partition.key 'user': data.dataset 't.csv' has 20 distinct 'user' values for data.num_clients=5"
        " clients, so they are grouped: value i in sorted order goes to client i % 5 (client 0: 'u00', 'u05',"
        " 'u10' and 1 more; client 1: 'u01', 'u06', 'u11' and 1 more; client 2: 'u02', 'u07', 'u12' and 1 more;"
        " client 3: 'u03', 'u08', 'u13' and 1 more; ...); set data.num_clients=20 for one client per value"
    )
    assert grouped_keys_line("user", "t.csv", groups, private=True) == (
        "data.partition.key 'user': data.dataset 't.csv' has 20 distinct 'user' values for data.num_clients=5"
        " clients, so they are grouped: value i in sorted order goes to client i % 5;"
        " set data.num_clients=20 for one client per value"
    )


def test_by_key_too_many_clients():
    ds = datasets.Dataset.from_dict({"author": ["a", "b"]})
    with pytest.raises(ValueError, match="2 distinct values of 'author'"):
        ByKey("author")(ds, 3, seed=0)


def test_sorted_shards_are_contiguous_in_score():
    ds = datasets.Dataset.from_dict({"score": [5.0, 1.0, 3.0, 1.0, 4.0, 2.0]})
    parts = SortedShards("score")(ds, 3, seed=0)
    assert parts == [[1, 3], [2, 5], [0, 4]]  # ties (1.0 at rows 1, 3) broken by index


def test_sorted_shards_errors():
    with pytest.raises(ValueError, match="'score' must be numeric"):
        SortedShards("score")(datasets.Dataset.from_dict({"score": ["a", "b"]}), 2, seed=0)
    with pytest.raises(ValueError, match="row 1 has no 'score'"):
        SortedShards("score")(datasets.Dataset.from_dict({"score": [1.0, float("nan")]}), 2, seed=0)


def test_by_column_matches_synthetic_clients():
    ds = planted_preferences(num_clients=4, examples_per_client=5)
    parts = ByColumn()(ds, 4, seed=0)
    assert parts == [list(range(5 * k, 5 * k + 5)) for k in range(4)]


def test_by_column_errors():
    ds = datasets.Dataset.from_dict({"client": [0, 1, 7]})
    with pytest.raises(ValueError, match="row 2 has client 7"):
        ByColumn()(ds, 3, seed=0)
    with pytest.raises(ValueError, match="client 2 got no examples"):
        ByColumn()(datasets.Dataset.from_dict({"client": [0, 1, 1]}), 3, seed=0)
    with pytest.raises(ValueError, match="'x'"):
        ByColumn()(datasets.Dataset.from_dict({"client": ["x"]}), 1, seed=0)


def test_missing_column_lists_columns():
    ds = _labelled(n=10)
    for partitioner, name in [
        (Dirichlet(1.0, "topic"), "topic"),
        (ByKey("topic"), "topic"),
        (SortedShards("len"), "len"),
        (ByColumn(), "client"),
    ]:
        with pytest.raises(ValueError, match=f"no column '{name}'") as info:
            partitioner(ds, 2, seed=0)
        assert "label, score" in str(info.value)


def test_null_key_names_row():
    ds = datasets.Dataset.from_dict({"label": ["a", None, "b"]})
    with pytest.raises(ValueError, match="row 1 has no 'label' value"):
        ByKey("label")(ds, 2, seed=0)


def test_too_few_rows_names_empty_client():
    with pytest.raises(ValueError, match="client 3 got no examples"):
        IID()(_labelled(n=3), 4, seed=0)


def test_check_partition():
    with pytest.raises(ValueError, match=r"^partition my split: client 1 got no examples$"):
        check_partition([[0], [], [1]], 3, "my split")
    with pytest.raises(ValueError, match="2 shards for 3 clients"):
        check_partition([[0], [1]], 3, "my split")
    assert check_partition([[0], [1]], 2, "ok") == [[0], [1]]


def test_bad_num_clients():
    with pytest.raises(ValueError, match="num_clients"):
        IID()(_labelled(n=10), 0, seed=0)


def test_works_on_shuffled_views():
    ds = _labelled(n=50).shuffle(seed=0)
    y = ds["label"][:]
    parts = ByKey("label")(ds, 10, seed=0)
    for values in ({y[i] for i in p} for p in parts):
        assert len(values) == 1
