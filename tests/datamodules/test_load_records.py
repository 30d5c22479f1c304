"""The ``load_records()`` hook, the derived data seed, and ``synthetic_args.num_clients``."""

import os
import re

import datasets
import pytest
import torch

from lightning_fed.datamodules import PreferenceDataModule
from lightning_fed.modules.backbone import load_tokenizer


class InMemoryPairs(PreferenceDataModule):
    """A data module whose records are built in code, not read from ``dataset``."""

    def __init__(self, rows, **kwargs):
        super().__init__(dataset="in-memory", **kwargs)
        self.rows = rows

    def load_records(self):
        return self.map_fields(datasets.Dataset.from_list(self.rows)) if self.field_map else self.rows


def pairs(n, prompt="Say something {i}."):
    return [
        {"question": prompt.format(i=i), "chosen": f"Yes {i}.", "rejected": f"No {i}.", "client": i % 3}
        for i in range(n)
    ]


def test_a_subclass_returns_records_and_the_base_validates_partitions_and_serves_them():
    tokenizer = load_tokenizer("bytes")
    dm = InMemoryPairs(pairs(12), num_clients=3, val_fraction=0.25, field_map={"prompt": "question"})
    dm.tokenizer = tokenizer
    dm.setup("fit")
    # The `client` column decides the partition: rows 0, 3, 6, 9 are client 0's; 1 of 4 held out.
    assert dm.client_sizes == [3, 3, 3] and [len(c.val_set) for c in dm.clients] == [1, 1, 1]
    items = dm.client(0).full_train + dm.client(0).val_set.items
    rows = sorted(int(re.search(r"Say something (\d+)\.", tokenizer.decode(x["chosen_input_ids"]))[1]) for x in items)
    assert rows == [0, 3, 6, 9]

    bad = InMemoryPairs([{"prompt": "  ", "chosen": "a", "rejected": "b"}] * 4, num_clients=1)
    bad.tokenizer = tokenizer
    with pytest.raises(ValueError, match="prompt") as err:
        bad.setup("fit")
    assert "\n" not in str(err.value) and not bad.clients


def test_data_seed_is_the_run_seed_unless_set(monkeypatch):
    monkeypatch.setenv("PL_GLOBAL_SEED", "17")  # what seed_everything(17) exports
    assert PreferenceDataModule(num_clients=2).seed == 17
    assert PreferenceDataModule(num_clients=2, seed=3).seed == 3
    monkeypatch.delenv("PL_GLOBAL_SEED")
    assert PreferenceDataModule(num_clients=2).seed == 0
    assert "PL_GLOBAL_SEED" not in os.environ


def test_synthetic_num_clients_is_data_num_clients():
    dm = PreferenceDataModule(num_clients=3, synthetic_args={"examples_per_client": 4})
    dm.tokenizer = load_tokenizer("bytes")
    dm.setup("fit")
    assert len(dm.clients) == 3 and all(size > 0 for size in dm.client_sizes)
    PreferenceDataModule(num_clients=3, synthetic_args={"num_clients": 3})  # the same value is allowed
    with pytest.raises(ValueError) as err:
        PreferenceDataModule(num_clients=3, synthetic_args={"num_clients": 5})
    assert str(err.value) == (
        "data.synthetic_args.num_clients=5 conflicts with data.num_clients=3;"
        " leave synthetic_args.num_clients out (it is data.num_clients)"
    )


def test_the_data_package_masks_labels_with_the_losses_ignore_index():
    from lightning_fed.datamodules.tokenize import IGNORE_INDEX as DATA_IGNORE
    from lightning_fed.modules.losses import IGNORE_INDEX

    assert DATA_IGNORE == IGNORE_INDEX == torch.nn.CrossEntropyLoss().ignore_index == -100
