"""Batched client turns: a round's clients trained together, one backbone forward for many adapters.

See :mod:`~lightning_fed.batching.multi_lora` (stacked adapters and their forward),
:mod:`~lightning_fed.batching.client_rows` (each row's client, per-client losses),
:mod:`~lightning_fed.batching.batched_turns` (a group of turns),
:mod:`~lightning_fed.batching.grouped_driver` (the loop's side), :mod:`~lightning_fed.batching.group_size`
(``federation.batch_clients``) and :mod:`~lightning_fed.batching.fallback` (when clients train sequentially).
"""
