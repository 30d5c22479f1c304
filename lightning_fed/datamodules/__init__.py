"""Datasets, formatting templates, partitioners, synthetic federated sets, client DataModules."""

from lightning_fed.datamodules.federated import ClientData, FederatedDataModule
from lightning_fed.datamodules.grouped_partition import GroupedDirichlet
from lightning_fed.datamodules.human_feedback import (
    FeedbackPreferenceDataModule,
    FeedbackSelectorDataModule,
    FeedbackSFTDataModule,
)
from lightning_fed.datamodules.instruction import InstructionDataModule
from lightning_fed.datamodules.partition import IID, ByColumn, ByKey, Dirichlet, Partitioner, SortedShards
from lightning_fed.datamodules.preference import PreferenceDataModule
from lightning_fed.datamodules.rlft import RLFTDataModule
from lightning_fed.datamodules.round_sampler import ClientBatchSampler, RoundBatchSampler
from lightning_fed.datamodules.selector import SelectorDataModule

__all__ = [
    "IID",
    "ByColumn",
    "ByKey",
    "ClientBatchSampler",
    "ClientData",
    "Dirichlet",
    "FederatedDataModule",
    "FeedbackPreferenceDataModule",
    "FeedbackSFTDataModule",
    "FeedbackSelectorDataModule",
    "GroupedDirichlet",
    "InstructionDataModule",
    "Partitioner",
    "PreferenceDataModule",
    "RLFTDataModule",
    "RoundBatchSampler",
    "SelectorDataModule",
    "SortedShards",
]
