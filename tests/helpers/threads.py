"""One intra-op thread for each test of a module that imports :func:`one_thread`."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """The test machine's cores are shared: one intra-op thread is faster and steadier (and the
    figures the training tests quote were measured with it)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
