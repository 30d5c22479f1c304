"""The federated data module: load, validate, partition and tokenize the clients' data sets.

Path of the data: ``dataset`` (hub name, local file, or ``synthetic:<name>``) -> records
with canonical fields -> :mod:`~lightning_fed.datamodules.partition` -> one
:class:`ClientData` per client (its own train/val/test sets, a DataModule of its own) -> the
round serving (:mod:`~lightning_fed.datamodules.round_serving`, a component the data module's
loader hooks hand over to), which lays the sampled clients' local batches out as one Lightning
epoch. What tokenizing cut or dropped is counted by
:class:`~lightning_fed.datamodules.encoding_counts.EncodingCounts`.

Validation rows are a ``val_fraction`` of each client's rows, or a separate
``val_dataset``; test rows come from ``test_dataset``. Separate sets are assigned to the
training clients by :func:`~lightning_fed.datamodules.eval_partition.evaluation_clients`
(the same key value goes to the same client).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any, ClassVar

import datasets
import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_warn
from torch.utils.data import DataLoader

from lightning_fed.data_cross_rules import (
    MAX_LENGTH,
    ON_OVERFLOW,
    default_min_prompt_length,
    grouped_keys_line,
    length_budget_problems,
    mapped_column,
    missing_key_line,
    row_line,
    synthetic_clients_problem,
    too_few_keys_line,
)
from lightning_fed.data_paths import dataset_text_problem
from lightning_fed.datamodules.client_data import ClientData
from lightning_fed.datamodules.client_encoding import encode_clients
from lightning_fed.datamodules.encoding_counts import EncodingCounts
from lightning_fed.datamodules.eval_partition import evaluation_clients, group_ids, split_validation
from lightning_fed.datamodules.partition import (
    IID,
    ByColumn,
    ByKey,
    MissingValue,
    Partitioner,
    TooFewKeys,
    check_partition,
)
from lightning_fed.datamodules.round_serving import EvaluationLayout, RoundServing
from lightning_fed.datamodules.sources import (
    FIELDS,
    SYNTHETIC_PREFIX,
    apply_field_map,
    load_records,
    read_source,
    validate_records,
)
from lightning_fed.datamodules.templates import CHAT, TEMPLATE_CHOICES, require_chat_template
from lightning_fed.datamodules.tokenize import PadCollator
from lightning_fed.errors import UserError
from lightning_fed.federation.round_plan import RoundPlan, RoundPlanner
from lightning_fed.option_rules import FEDERATED_DATA
from lightning_fed.option_rules import problems as rule_problems
from lightning_fed.stage_sets import EVALUATED, NO_TEST_SET, empty_set_line, planned_clients_line


class FederatedDataModule(pl.LightningDataModule):
    """Partitions one dataset into per-client DataModules and serves federated rounds.

    Subclasses set :attr:`kind` and implement :meth:`encode` (one record -> token fields). A
    subclass whose records do not come from ``dataset`` by name (presets, generated pairs)
    overrides :meth:`load_records` and returns them; validation, partitioning, tokenizing and
    serving stay here.

    Args:
        dataset: ``synthetic:<name>``, a local ``.json/.jsonl/.csv/.parquet`` file or folder,
            or a Hugging Face dataset name.
        num_clients: Number of clients to partition the data into.
        partition: How rows are assigned to clients. Default: the dataset's ``client``
            column when it has one (the synthetic sets do), else IID.
        field_map: Canonical field -> column of the source, e.g. ``{"prompt": "question"}``.
        split: Split to load for hub datasets.
        synthetic_args: Keyword arguments of the synthetic generator. Its ``num_clients`` is
            ``num_clients``: leave it out (a different value is an error).
        batch_size: Local batch size.
        eval_batch_size: Batch size of evaluation (default: ``batch_size``).
        max_length: Maximum tokens of prompt plus response.
        on_overflow: What to do with longer examples: ``error``, ``truncate`` or ``drop``.
        val_fraction: Fraction of each client's rows held out for its evaluation, when no
            ``val_dataset`` is given.
        template: Prompt template (see :mod:`~lightning_fed.datamodules.templates`):
            ``alpaca``, ``plain`` or ``chat`` (the tokenizer's own chat template); default is
            the subclass's :attr:`default_template`.
        seed: Seed of the partition and of the train/val split. Default (``None``): the run's
            seed, i.e. the value ``seed_everything`` set (the CLI's ``seed_everything``; 0 if
            nothing was seeded), read when the data is set up, as ``federation.seed`` is.
        system_prompt: System turn of ``template: chat`` (``None``: the chat template's own
            default, if it has one).
        truncation: With ``on_overflow: truncate``, what to keep: ``prompt_left`` (cut the
            prompt's start), ``prompt_middle`` (keep the prompt's head and tail) or
            ``response`` (keep the prompt, cut the response); see
            :mod:`~lightning_fed.datamodules.tokenize`.
        max_prompt_length: Prompt budget in tokens (TRL's ``max_prompt_length``): a longer
            prompt keeps its end (its head and tail with ``truncation: prompt_middle``).
            Default: no budget of its own.
        max_completion_length: Response budget in tokens (TRL's ``max_completion_length``): a
            longer response keeps its start. Default: no budget of its own.
        min_prompt_length: Fewest prompt tokens a cut prompt keeps (a shorter prompt is never
            cut); an example that would keep fewer is dropped and counted, not trained or
            scored without its question. Default: 16, or half of ``max_length`` (or of
            ``max_prompt_length``) when that is smaller.
        val_dataset: A separate validation set, in the forms of ``dataset``; its rows go to
            the training clients (same key, same client) and ``val_fraction`` is not used.
        test_dataset: A separate test set for ``lightning-fed test``, assigned the same way.
        val_split: Split of ``val_dataset`` when it is a hub data set.
        test_split: Split of ``test_dataset`` when it is a hub data set.
        group_key: Column whose values are reported separately by ``validate``/``test`` (e.g.
            a preference group). Default: ``group`` when the data has that column.
    """

    kind: ClassVar[str]
    default_template: ClassVar[str] = "alpaca"
    synthetic_clients_are_num_clients: ClassVar[bool] = True
    """A synthetic set's ``num_clients`` is this module's (``False``: it sizes the set only)."""

    def __init__(
        self,
        dataset: str,
        num_clients: int = 8,
        partition: Partitioner | None = None,
        field_map: dict[str, str] | None = None,
        split: str = "train",
        synthetic_args: dict[str, Any] | None = None,
        batch_size: int = 8,
        eval_batch_size: int | None = None,
        max_length: int = MAX_LENGTH,
        on_overflow: str = ON_OVERFLOW,
        val_fraction: float = 0.1,
        template: str | None = None,
        seed: int | None = None,
        system_prompt: str | None = None,
        truncation: str = "prompt_left",
        max_prompt_length: int | None = None,
        max_completion_length: int | None = None,
        min_prompt_length: int | None = None,
        val_dataset: str | None = None,
        test_dataset: str | None = None,
        val_split: str = "validation",
        test_split: str = "test",
        group_key: str | None = None,
    ) -> None:
        super().__init__()
        # lightning_fed/option_rules.py (the precheck applies the same rules before torch). `null`
        # reaches here from a YAML or `--data.init_args.batch_size=null` (found by tests/boundary)
        values = dict(num_clients=num_clients, batch_size=batch_size, max_length=max_length)
        values.update(on_overflow=on_overflow, val_fraction=val_fraction, truncation=truncation)
        problems = rule_problems(FEDERATED_DATA, values)
        if problems:  # the checks below assume these values are in range
            raise ValueError("; ".join(problems))
        if problem := dataset_text_problem("data.dataset", dataset):
            problems.append(problem)
        template = template or self.default_template
        if template not in self.template_choices():
            problems.append(f"data.template must be one of {list(self.template_choices())}, got {template!r}")
        if system_prompt is not None and not template.startswith(CHAT):
            problems.append(f"data.system_prompt is used by data.template=chat only, got data.template={template!r}")
        if min_prompt_length is None:
            min_prompt_length = default_min_prompt_length(max_length, max_prompt_length)
        problems += length_budget_problems(
            max_length, max_prompt_length, max_completion_length, min_prompt_length, on_overflow == "truncate"
        )
        # lightning_fed/data_cross_rules.py: the precheck's lines too
        if self.synthetic_clients_are_num_clients and (
            problem := synthetic_clients_problem(dataset, synthetic_args or {}, num_clients)
        ):
            problems.append(problem)
        if problems:
            raise ValueError("; ".join(problems))
        self.dataset, self.num_clients, self.partition = dataset, num_clients, partition
        self.field_map, self.split, self.synthetic_args = field_map, split, synthetic_args
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size or batch_size
        self.max_length, self.on_overflow, self.val_fraction = max_length, on_overflow, val_fraction
        self.template, self._seed = template, seed
        self.system_prompt, self.truncation = system_prompt, truncation
        self.max_prompt_length, self.max_completion_length = max_prompt_length, max_completion_length
        self.min_prompt_length = min_prompt_length
        self.val_dataset, self.test_dataset = val_dataset, test_dataset
        self.val_split, self.test_split, self.group_key = val_split, test_split, group_key
        self.tokenizer: Any = None
        self.clients: list[ClientData] = []
        self.serving = RoundServing()  # the rounds' and evaluations' loaders (given the clients in setup)
        self.group_names: list[str] = []  # group_id -> value of `group_key` (val/test items)
        self.encoding = EncodingCounts()  # examples truncated and dropped per set and client
        self.key_groups: list[list[Any]] | None = None  # ByKey: the values of its key each client holds
        #: Whether the run is private (differential privacy): its log lines then carry no figure per
        #: client. Set by the CLI and the Flower client before :meth:`setup`; ``None``: asked of the Trainer.
        self.private: bool | None = None

    @property
    def seed(self) -> int:
        """``data.seed``, or the run's seed (``seed_everything``) when it was left unset."""
        if self._seed is None:  # as FederatedLoop.seed: the value seed_everything exported
            self._seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
        return self._seed

    @seed.setter
    def seed(self, value: int | None) -> None:
        self._seed = value

    @classmethod
    def template_choices(cls) -> tuple[str, ...]:
        """Valid values of ``data.template`` for this kind of data."""
        return TEMPLATE_CHOICES

    # ------------------------------------------------------------------------------ serving
    # Lightning's loader hooks and the serving's public face; the serving itself is RoundServing's.
    @property
    def collate(self) -> PadCollator:
        """Batch collation of every loader (set up with the tokenizer's pad id)."""
        return self._serving().collate

    @property
    def client_sizes(self) -> list[int]:
        """``|D_k|`` of every client after selection (see :attr:`RoundServing.client_sizes`)."""
        return self._serving().client_sizes

    def client(self, client_id: int) -> ClientData:
        """The DataModule of one client."""
        return self.clients[client_id]

    def connect(self, planner: RoundPlanner) -> None:
        """Serve the rounds ``planner`` decides (see :mod:`~lightning_fed.federation.round_plan`)."""
        self.serving.connect(planner)

    @property
    def plan(self) -> RoundPlan | None:
        """The round the last training loader laid out."""
        return self.serving.plan

    @property
    def eval_plan(self) -> EvaluationLayout | None:
        """Set by FederatedLoop: () -> (clients to evaluate, whether batches may mix clients);
        ``None`` (no loop): every client, one client per batch."""
        return self.serving.eval_plan

    @eval_plan.setter
    def eval_plan(self, layout: EvaluationLayout | None) -> None:
        self.serving.eval_plan = layout

    def train_dataloader(self) -> DataLoader:
        """The batches of the planner's next round: its turns, one client after another."""
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer is not None else (0, 1)
        return self._serving().train_loader(self.batch_size, self.seed, rank, world)

    def val_dataloader(self) -> DataLoader:
        """The clients of ``eval_plan`` (``federation.eval_clients``; all without a loop), one after another."""
        return self._serving().eval_loader(attrgetter("val_set"), self.eval_batch_size)

    def test_dataloader(self) -> DataLoader:
        """The planned clients' rows of ``test_dataset``, one client after another (as validation)."""
        self._require_test_set()
        return self._serving().eval_loader(attrgetter("test_set"), self.eval_batch_size)

    def _serving(self) -> RoundServing:
        if not self.serving.ready:
            raise RuntimeError("FederatedDataModule: call setup() before asking for clients' loaders or sizes")
        return self.serving

    def _require_test_set(self) -> None:
        if self.test_dataset is None:
            raise ValueError(NO_TEST_SET)  # lightning_fed/stage_sets.py: the precheck's line too

    # ----------------------------------------------------------------------------- building
    def encode(self, record: dict[str, Any]) -> dict[str, list[int]]:
        """Token fields of one validated record (``input_ids``/``labels`` or chosen/rejected)."""
        raise NotImplementedError  # abstract: implemented by InstructionDataModule / PreferenceDataModule

    def load_records(self) -> datasets.Dataset | Sequence[Mapping[str, Any]]:
        """The training records, before partitioning: the hook for data that is not a plain source.

        The default reads ``dataset`` (``split``, ``synthetic_args``) and renames its columns
        with ``field_map``. A subclass returns its own records (a ``datasets.Dataset`` or a list
        of dicts) with the canonical fields of :attr:`kind` (use :meth:`map_fields` to apply
        ``field_map``); :meth:`setup` validates, partitions (a ``client`` column is used when
        present), splits, tokenizes and serves them.
        """
        return self.map_fields(self._read(self.dataset, self.split, 0))

    def map_fields(self, records: datasets.Dataset) -> datasets.Dataset:
        """``records`` with ``field_map`` applied (source column -> canonical field)."""
        return apply_field_map(records, self.kind, self.dataset, self.field_map)

    def _training_records(self) -> datasets.Dataset:
        records = self.load_records()
        if not isinstance(records, datasets.Dataset):
            records = datasets.Dataset.from_list([dict(r) for r in records])
        # a field read from another column is named with it where field_map renamed the source's columns
        reads_source = type(self).load_records is FederatedDataModule.load_records
        validate_records(records, self.kind, self.dataset, field_map=self.field_map if reads_source else None)
        return records

    def setup(self, stage: str | None = None) -> None:
        if stage == "test":
            self._require_test_set()
        if self.clients:
            return self._require_examples(stage)
        if self.tokenizer is None:
            if self.trainer is None or not hasattr(self.trainer.lightning_module, "tokenizer"):
                raise ValueError(
                    "data: no tokenizer; attach the data module to a Trainer with a lightning_fed module"
                    " or set `.tokenizer`"
                )
            self.tokenizer = self.trainer.lightning_module.tokenizer
        if self.template.startswith(CHAT):
            require_chat_template(self.tokenizer)
        records = self._training_records()
        partition = self.partition or (ByColumn("client") if "client" in records.column_names else IID())
        try:
            parts = partition(records, self.num_clients, self.seed)
        except TooFewKeys as err:  # the precheck's line, for a set it cannot read (a hub set, a large file)
            raise UserError(too_few_keys_line(err.key, self.dataset, err.values, self.num_clients)) from None
        except MissingValue as err:  # the precheck's line too (data_columns.data_columns_problem)
            raise UserError(self._missing_value_line(partition, err)) from None
        check_partition(parts, self.num_clients, f"{type(partition).__name__} of data.dataset {self.dataset!r}")
        # ByKey's values per client: more values than clients are grouped, said below (red team 17 B20)
        self.key_groups = partition.groups(records, self.num_clients) if isinstance(partition, ByKey) else None
        collate = PadCollator(self.tokenizer.pad_token_id)
        train = self._encode_set("train", records, parts, self.dataset)
        for cid, items in enumerate(train):
            if not items:
                raise UserError(self._no_example_left(cid, len(parts[cid])))
        if self.val_dataset is not None:
            val = self._evaluation_set("val", self.val_dataset, self.val_split, records, 1)
        else:
            train, val = zip(
                *(split_validation(items, self.val_fraction, self.seed, cid) for cid, items in enumerate(train))
            )
        test = [[] for _ in range(self.num_clients)]
        if self.test_dataset is not None:
            test = self._evaluation_set("test", self.test_dataset, self.test_split, records, 2)
        # Each client keeps the raw values of the data's non-text columns in its rows (e.g. a
        # device's `rank`): what a client knows about itself once its text is tokenized.
        meta = {c: records[c] for c in records.column_names if c not in sum(FIELDS.get(self.kind, ()), ())}
        for cid in range(self.num_clients):
            columns = {c: [values[i] for i in parts[cid]] for c, values in meta.items()}
            self.clients.append(
                ClientData(cid, train[cid], val[cid], self.batch_size, collate, test[cid], columns=columns)
            )
        self.serving.serve(self.clients, collate)
        self._require_examples(stage)  # before the warnings: the refusal is the one line said
        if self.key_groups is not None and any(len(values) > 1 for values in self.key_groups):
            line = grouped_keys_line(self.partition.key, self.dataset, self.key_groups, self._private_run())
            rank_zero_warn(line)
        self.encoding.warn(self.max_length, self.truncation, self.min_prompt_length, self._private_run())

    def _require_examples(self, stage: str | None) -> None:
        """Refuse ``validate``/``test`` (``stage``) when its set holds no example for any client."""
        if (name := EVALUATED.get(stage or "")) is None or any(len(getattr(c, f"{name}_set")) for c in self.clients):
            return
        source = self.test_dataset if name == "test" else self.val_dataset
        why = self.encoding.left_none(name, self.max_length, self.min_prompt_length) if source is not None else None
        raise UserError(empty_set_line(stage, source, self.val_fraction, why))

    def require_planned_examples(self, stage: str, planned: list[int], plan: str) -> None:
        """Refuse ``validate``/``test`` (``stage``) when the clients its plan picks (``planned``, by ``plan``:
        the options, as :func:`~lightning_fed.stage_sets.planned_clients_line` names them) have no example of
        its set while other clients have some: it would score nothing and exit 0 (issue 41)."""
        name = EVALUATED[stage]
        holding = [c.client_id for c in self.clients if len(getattr(c, f"{name}_set"))]
        if holding and not any(len(getattr(self.clients[cid], f"{name}_set")) for cid in planned):
            source = self.test_dataset if name == "test" else self.val_dataset
            raise UserError(planned_clients_line(stage, plan, planned, holding, source, self.val_fraction))

    def _private_run(self) -> bool:
        """:attr:`private`, else what the Trainer's federated loop reports (its round report's
        ``private``; read through the loop, not the privacy package, which imports data modules)."""
        if self.private is not None:
            return self.private
        trainer = self.trainer
        loops = [c for c in trainer.callbacks if hasattr(c, "server")] if trainer is not None else []
        return bool(loops and getattr(getattr(loops[0].server, "report", None), "private", False))

    def _synthetic_args(self, dataset: str, salt: int) -> dict[str, Any]:
        """``synthetic_args`` with ``num_clients``; a separate val/test set (``salt``) is a fresh draw."""
        synthetic_args = dict(self.synthetic_args or {})
        if dataset.startswith(SYNTHETIC_PREFIX):
            synthetic_args.setdefault("num_clients", self.num_clients)
            if salt:
                synthetic_args["seed"] = synthetic_args.get("seed", 0) + 1000 * salt
        return synthetic_args

    def _read(self, dataset: str, split: str, salt: int) -> datasets.Dataset:
        """The source's rows as it has them."""
        return read_source(dataset, split, self._synthetic_args(dataset, salt))

    def _load(self, dataset: str, split: str, field: str, salt: int) -> datasets.Dataset:
        """A separate validation or test set, renamed and validated; errors name ``field``."""
        try:
            return load_records(
                dataset,
                self.kind,
                split=split,
                field_map=self.field_map,
                synthetic_args=self._synthetic_args(dataset, salt),
            )
        except (ValueError, FileNotFoundError) as err:  # the source names data.dataset; this set is `field`
            raise type(err)(str(err).replace("data.dataset", field, 1)) from None

    def _missing_value_line(self, partition: Partitioner, err: MissingValue) -> str:
        """The line refusing ``data.dataset``'s row ``err.row`` without a value in the column the option
        of ``partition`` (``data.partition.key``) names (red team 15 M2: two lines naming neither)."""
        fields = dataclasses.fields(partition) if dataclasses.is_dataclass(partition) else ()
        option = next((f.name for f in fields if getattr(partition, f.name) == err.column), None)
        if option is None:  # a partitioner of the user's own: its line as it says it
            return str(err)
        # the rows of the file data.dataset in its order, where the source is read as is: its line too
        line = row_line(self.dataset, err.row) if type(self).load_records is FederatedDataModule.load_records else None
        column = mapped_column(err.column, self.field_map)
        return missing_key_line(
            f"data.partition.{option}", err.column, "data.dataset", self.dataset, err.row, line, column, err.value
        )

    def _no_example_left(self, cid: int, rows: int) -> str:
        """The line refusing client ``cid``, whose ``rows`` training rows were all left out while encoded:
        too long for ``data.max_length`` with ``on_overflow: drop``, or a cut prompt below
        ``data.min_prompt_length``, naming the options, their values and ``data.dataset``."""
        dropped = self.encoding.counts["dropped"]["train"][cid]
        why = [f"{dropped} of its {rows} rows longer than data.max_length={self.max_length}"] if dropped else []
        if short := rows - dropped:
            why.append(
                f"{short} whose cut prompt kept fewer than data.min_prompt_length={self.min_prompt_length} tokens"
            )
        fix = "set data.on_overflow to truncate" if dropped else "lower data.min_prompt_length"
        return (
            f"data.on_overflow={self.on_overflow!r}: client {cid} of data.dataset {self.dataset!r} has no example left"
            f" ({'; '.join(why)}); raise data.max_length or {fix}"
        )

    def _encode_set(
        self, name: str, records: Any, parts: list[list[int]], source: str, groups: list[int] | None = None
    ) -> list[list[dict[str, Any]]]:
        """Encode each client's rows; count truncated and dropped examples under ``name``."""
        return encode_clients(
            records.to_list(), parts, self.encode, self.encoding, name, source, self.on_overflow, groups
        )

    def _note_truncation(self) -> None:
        """``on_truncate`` callback of the tokenizers (:meth:`encode`): the current example was cut."""
        self.encoding.note_truncation()

    def length_budget(self) -> dict[str, Any]:
        """Keyword arguments of the tokenizers beyond ``max_length``/``on_overflow``/``truncation``."""
        return {
            "max_prompt_length": self.max_prompt_length,
            "max_completion_length": self.max_completion_length,
            "min_prompt_length": self.min_prompt_length,
            "on_prompt_loss": self.encoding.note_prompt_loss,
        }

    def _evaluation_set(self, name: str, dataset: str, split: str, train: Any, salt: int) -> list[list[dict[str, Any]]]:
        field = f"data.{name}_dataset"
        records = self._load(dataset, split, field, salt)
        # the file's own columns are listed where the source is read as is (red team 16 B4)
        field_map = self.field_map if type(self).load_records is FederatedDataModule.load_records else None
        parts = evaluation_clients(
            self.partition, train, records, self.num_clients, self.seed + salt, field, dataset, field_map
        )
        return self._encode_set(name, records, parts, dataset, group_ids(records, self.group_key, self.group_names))

    def data_report(self) -> dict[str, Any]:
        """Examples truncated and dropped per set and client (written to ``summary.json``)."""
        report = {"truncation": self.truncation, **self.encoding.report(), "groups": self.group_names}
        if self.key_groups is not None:  # ByKey: how many of its key's values each client holds
            key = {"key": self.partition.key, "distinct_values": sum(map(len, self.key_groups))}
            report["key_groups"] = {**key, "values_per_client": [len(values) for values in self.key_groups]}
        return report
