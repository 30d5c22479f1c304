"""The keys a transformers config class takes, read from the installed transformers' source.

``model.backbone.config`` is handed to ``AutoConfig.for_model(model_type, **config)``
(:func:`lightning_fed.modules.backbone._build_from_config`), which keeps a key no config has as
an attribute nobody reads: ``n_embd_: 8`` built GPT-2's default 768-wide model silently (issue
41). The precheck (:func:`lightning_fed.class_options._backbone_source_problem`) refuses such a
key with the closest one, before torch is imported: importing a configuration module imports
transformers and torch, so the class is read with ``ast`` from
``transformers/models/<model_type>/configuration_<model_type>.py``: its fields (transformers 5's
dataclass configs) or ``__init__`` parameters (4's), its ``attribute_map``, the keys its
``__init__`` / ``__post_init__`` pop from ``kwargs``, and the same of its base classes
(``PreTrainedConfig``'s ``output_hidden_states``, ``torch_dtype``...). A model type whose class
is not found there, or a base class named ``...Config`` that cannot be read, gives ``None``: the
key is left to the live code. ``tests/test_transformers_configs.py`` keeps the keys read here a
superset of the live class's. Imports nothing but the standard library.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path


def _transformers_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("transformers")  # finds the package without importing it
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]) if locations else None


@functools.lru_cache(maxsize=64)
def _tree(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


def _imported_from(tree: ast.Module, here: Path, name: str) -> Path | None:
    """The file of transformers that module ``here`` imports ``name`` from (``from ...x import name``)."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            base = here.parent
            for _ in range(max(node.level - 1, 0)):
                base = base.parent
            parts = (node.module or "").split(".")
            if node.level == 0:
                if parts[0] != "transformers" or (root := _transformers_dir()) is None:
                    return None
                base, parts = root, parts[1:]
            target = base.joinpath(*parts) if parts != [""] else base
            return target.with_suffix(".py") if target.with_suffix(".py").is_file() else None
    return None


def _pops(function: ast.FunctionDef) -> set[str]:
    """The string keys ``function`` pops or gets from a mapping (``kwargs.pop("torch_dtype", None)``)."""
    found = set()
    for node in ast.walk(function):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("pop", "get")
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "kwargs"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
    return found


def _class_keys(path: Path, name: str, seen: frozenset[str] = frozenset()) -> set[str] | None:
    """The keys class ``name`` of file ``path`` and its bases take, or ``None`` if a config base is unreadable."""
    tree = _tree(path)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None) if tree else None
    if node is None or name in seen:
        return None
    keys: set[str] = set()
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            if "ClassVar" not in ast.unparse(item.annotation):
                keys.add(item.target.id)
        elif isinstance(item, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "attribute_map" for t in item.targets
        ):
            if isinstance(item.value, ast.Dict):
                keys |= {k.value for k in item.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        elif isinstance(item, ast.FunctionDef) and item.name in ("__init__", "__post_init__"):
            args = item.args
            keys |= {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if a.arg != "self"}
            keys |= _pops(item)
    for base in node.bases:
        base_name = base.id if isinstance(base, ast.Name) else None
        if base_name is None:
            continue
        local = any(isinstance(n, ast.ClassDef) and n.name == base_name for n in tree.body)
        where = path if local else _imported_from(tree, path, base_name)
        inherited = _class_keys(where, base_name, seen | {name}) if where is not None else None
        if inherited is None and base_name.endswith("Config"):
            return None  # a config base not read: its keys are unknown here
        keys |= inherited or set()
    return keys


def _config_class(model_type: str) -> tuple[Path, ast.ClassDef] | None:
    """The file and definition of the installed transformers' config class of ``model_type``."""
    root = _transformers_dir()
    if root is None or not model_type.replace("-", "_").isidentifier():
        return None
    folder = model_type.replace("-", "_")
    path = root / "models" / folder / f"configuration_{folder}.py"
    tree = _tree(path) if path.is_file() else None
    for node in tree.body if tree is not None else []:
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            value = item.value if isinstance(item, (ast.Assign, ast.AnnAssign)) else None
            target = item.targets[0] if isinstance(item, ast.Assign) else getattr(item, "target", None)
            if (
                isinstance(target, ast.Name)
                and target.id == "model_type"
                and isinstance(value, ast.Constant)
                and value.value == model_type
            ):
                return path, node
    return None


def config_class_keys(model_type: str) -> tuple[str, frozenset[str]] | None:
    """``(class name, the keys it takes)`` of the installed transformers' config class of
    ``model_type`` (``gpt2`` -> ``GPT2Config``), read from its source; ``None`` if not found."""
    found = _config_class(model_type)
    if found is None:
        return None
    keys = _class_keys(found[0], found[1].name)
    return None if keys is None else (found[1].name, frozenset(keys | {"model_type"}))


HEADS_DIVIDE: dict[str, tuple[str, str]] = {
    "gpt2": ("n_embd", "n_head"),
    "opt": ("hidden_size", "num_attention_heads"),
    "gpt_neox": ("hidden_size", "num_attention_heads"),
    "llama": ("hidden_size", "num_attention_heads"),
}
"""Model types whose attention (GPT-2's and OPT's ``embed_dim must be divisible by num_heads``)
or config (GPT-NeoX's ``The hidden size is not divisible by the number of attention heads``,
Llama's ``The hidden size (32) is not a multiple of the number of attention heads (3)``)
refuses a width its number of heads does not divide: ``(width key, heads key)`` as the class
names them. ``tests/test_transformers_configs.py`` builds each with a width the heads do not
divide and sees it refused."""


def _own_integers(node: ast.ClassDef) -> tuple[dict[str, int], dict[str, str]]:
    """A config class's own integer defaults (dataclass fields, or ``__init__``'s defaults) and its
    ``attribute_map`` (alias -> the key it stands for)."""
    defaults: dict[str, int] = {}
    aliases: dict[str, str] = {}
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            if isinstance(item.value, ast.Constant) and type(item.value.value) is int:
                defaults[item.target.id] = item.value.value
        elif isinstance(item, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "attribute_map" for t in item.targets
        ):
            if isinstance(item.value, ast.Dict):
                for k, v in zip(item.value.keys, item.value.values, strict=True):
                    if isinstance(k, ast.Constant) and isinstance(v, ast.Constant):
                        aliases[str(k.value)] = str(v.value)
        elif isinstance(item, ast.FunctionDef) and item.name == "__init__":
            args = item.args.args[len(item.args.args) - len(item.args.defaults) :]
            for arg, default in zip(args, item.args.defaults, strict=True):
                if isinstance(default, ast.Constant) and type(default.value) is int:
                    defaults[arg.arg] = default.value
    return defaults, aliases


def heads_problem(option: str, config: dict) -> str | None:
    """The line refusing a ``model.backbone.config`` (``option``) whose number of attention heads
    does not divide its width, for a model type of :data:`HEADS_DIVIDE`; each key named as the user
    wrote it (``n_head`` or its alias ``num_attention_heads``), a width not given as the class's
    default. ``None`` where a value is not a positive integer or a default cannot be read."""
    model_type = config.get("model_type")
    if (
        not isinstance(model_type, str)
        or model_type not in HEADS_DIVIDE
        or (found := _config_class(model_type)) is None
    ):
        return None
    defaults, aliases = _own_integers(found[1])
    given: dict[str, tuple[str, object]] = {}
    for key, value in config.items():
        canonical = aliases.get(str(key), str(key))
        if canonical not in given or canonical == key:  # the class's own name wins over its alias
            given[canonical] = (str(key), value)
    width_key, heads_key = HEADS_DIVIDE[model_type]
    name = found[1].name
    if heads_key not in given:
        return None  # the default heads divide the default width; a given width is the sizes check's
    (heads_as, heads), width_given = given[heads_key], given.get(width_key)
    width_as, width = width_given if width_given else (width_key, defaults.get(width_key))
    if not all(type(v) is int and v > 0 for v in (heads, width)) or width % heads == 0:
        return None
    where = f"{option}.{width_as}" if width_given else f"{name}'s default {width_as}"
    return (
        f"{option}.{heads_as}={heads} must divide {where}={width} ({name}: each of the {heads_as} attention heads"
        f" takes {width_key} / {heads_as} dimensions)"
    )


MODULE_NAMES: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {
    "gpt2": (
        frozenset(
            {"transformer", "wte", "wpe", "drop", "h", "ln_1", "attn", "c_attn", "c_proj", "attn_dropout"}
            | {"resid_dropout", "ln_2", "mlp", "c_fc", "act", "dropout", "ln_f", "lm_head"}
        ),
        ("c_attn", "c_fc", "c_proj", "lm_head"),
    ),
}
"""Model type -> (the last path component of every module of its causal LM but the layers'
numbers, its Linear-like ones): what :func:`lightning_fed.modules.lora.lora_config` finds
``model.lora.target_modules`` among after the model is built. ``tests/test_transformers_configs.py``
compares them with a live model's."""


def missing_modules_problem(model_type: object, targets: object) -> str | None:
    """The line :func:`lightning_fed.modules.lora.lora_config` refuses ``model.lora.target_modules``
    with, for a model type of :data:`MODULE_NAMES`; a dotted target or a layer's number is left to it."""
    if not isinstance(model_type, str) or model_type not in MODULE_NAMES or not isinstance(targets, list):
        return None
    names, linear = MODULE_NAMES[model_type]
    simple = [t for t in targets if isinstance(t, str) and "." not in t and not t.isdigit()]
    if len(simple) != len(targets) or not (missing := [t for t in simple if t not in names]):
        return None  # a dotted path or a layer's number: the live model's (the line names every missing one)
    return (
        f"model.lora.target_modules: model type {model_type!r} has no module named "
        f"{', '.join(map(repr, missing))} (Linear-like modules it has: {', '.join(linear)})"
    )


_MAPPINGS = ("models/auto/auto_mappings.py", "models/auto/configuration_auto.py")
"""Where transformers lists its model types: ``CONFIG_MAPPING_NAMES`` (5.x: ``auto_mappings.py``,
then updated in ``configuration_auto.py``; 4.x: ``configuration_auto.py`` alone)."""


@functools.lru_cache(maxsize=1)
def model_types() -> frozenset[str] | None:
    """The ``model_type`` names ``AutoConfig.for_model`` takes in the installed transformers (the
    keys of its ``CONFIG_MAPPING_NAMES``, read from its source), or ``None`` if they cannot be read."""
    root = _transformers_dir()
    found: set[str] = set()
    for name in _MAPPINGS:
        tree = _tree(root / name) if root is not None and (root / name).is_file() else None
        for statement in tree.body if tree is not None else []:
            if "CONFIG_MAPPING_NAMES" not in ast.unparse(statement).split("=", 1)[0].split("(", 1)[0]:
                continue
            for node in ast.walk(statement):
                pairs = []
                if isinstance(node, ast.Tuple) and len(node.elts) == 2:
                    pairs = [tuple(node.elts)]
                elif isinstance(node, ast.Dict):
                    pairs = [(k, v) for k, v in zip(node.keys, node.values) if k is not None]
                for key, value in pairs:
                    if all(isinstance(x, ast.Constant) and isinstance(x.value, str) for x in (key, value)):
                        if value.value.endswith("Config"):
                            found.add(key.value)
    return frozenset(found) if found else None


def model_type_problem(option: str, model_type: str) -> str | None:
    """The line refusing ``model_type`` (given to ``option``) that the installed transformers does
    not know, with the closest it knows; ``None`` if it knows it or its list cannot be read. The
    model loader (:func:`lightning_fed.modules.backbone._build_from_config`) says the same line."""
    known = model_types()
    if known is None or model_type in known:
        return None
    import difflib

    def score(name: str) -> tuple[float, int]:  # a tie goes to the name whose digits are where the typo's are
        kind = sum(a.isdigit() == b.isdigit() for a, b in zip(name, model_type))
        return difflib.SequenceMatcher(None, model_type, name).ratio(), kind

    near = sorted(difflib.get_close_matches(model_type, sorted(known), n=5, cutoff=0.6), key=score, reverse=True)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return f"{option} {model_type!r} is no model type of the installed transformers{hint}"


KV_HEADS_DIVIDE: dict[str, tuple[str, str]] = {"llama": ("num_attention_heads", "num_key_value_heads")}
"""Model types whose attention repeats each key/value head ``heads / kv_heads`` times: a number of
key/value heads that does not divide the heads built the model and failed at its first forward
(``The size of tensor a (4) must match the size of tensor b (3)``, exit 1 after the run folder was
written; red team 8's t15). ``(heads key, kv heads key)``; kv heads default to the heads. Any other
model type whose config class takes both keys of :data:`KV_KEYS` (Qwen2's, Mistral's: red team 9
rows 2 and 5) is checked the same way (:func:`_kv_keys`)."""
KV_KEYS = ("num_attention_heads", "num_key_value_heads")
"""The grouped-query attention keys transformers' configs share (Llama's, Qwen2's, Mistral's, ...)."""
ACTIVATION_KEYS = ("activation_function", "hidden_act")
"""The config keys naming an activation that ``transformers.activations.ACT2FN`` looks up (GPT-2's,
the common one); an unknown name was ``KeyError: gelu_nw`` after the imports (t09)."""
EPSILON_SUFFIXES = ("_eps", "_epsilon")
"""A normalisation's epsilon (``layer_norm_epsilon``, ``rms_norm_eps``): a divisor's guard, > 0."""


@functools.lru_cache(maxsize=1)
def activation_names() -> tuple[str, ...] | None:
    """The keys of the installed transformers' ``ACT2CLS`` (what ``ACT2FN`` takes), read from
    ``transformers/activations.py``; ``None`` if they cannot be read."""
    root = _transformers_dir()
    tree = _tree(root / "activations.py") if root is not None and (root / "activations.py").is_file() else None
    for node in tree.body if tree is not None else []:
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and target.id == "ACT2CLS" and isinstance(node.value, ast.Dict):
            keys = [k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            return tuple(keys) if len(keys) == len(node.value.keys) else None
    return None


def _float_fields(node: ast.ClassDef) -> frozenset[str]:
    """A transformers 5 config class's own dataclass fields annotated ``float`` alone (its strict
    validation refuses an ``int`` there: ``Field 'layer_norm_epsilon' expected float, got int``)."""
    return frozenset(
        item.target.id
        for item in node.body
        if isinstance(item, ast.AnnAssign)
        and isinstance(item.target, ast.Name)
        and ast.unparse(item.annotation).replace(" ", "") in ("float", "float|None")
    )


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def config_values_problem(option: str, config: dict, tokenizer_size: int | None) -> str | None:
    """The line refusing a ``model.backbone.config`` (``option``) value its model refuses only once
    built (red team 8, rows 3 and 4): a dropout probability outside [0, 1], an epsilon <= 0, an
    ``int`` where the class's field is ``float``, an activation ``ACT2FN`` does not know, key/value
    heads that do not divide the heads (:data:`KV_HEADS_DIVIDE`), a ``vocab_size`` below the
    tokenizer's ``tokenizer_size`` (``IndexError: index out of range in self`` at the first batch)."""
    model_type = config.get("model_type")
    found = _config_class(model_type) if isinstance(model_type, str) else None
    floats = _float_fields(found[1]) if found is not None else frozenset()
    for key, value in config.items():
        key = str(key)
        if (key.endswith("pdrop") or "dropout" in key) and _number(value) and not 0 <= value <= 1:
            return f"{option}.{key} must be a probability in [0, 1], got {value}"
        if key.endswith(EPSILON_SUFFIXES) and _number(value) and not value > 0:
            return f"{option}.{key} must be a number > 0 (such as 1e-05), got {value}"
        if key in floats and type(value) is int:
            return f"{option}.{key} must be a float ({value}.0, not {value}): {found[1].name} refuses an int there"
        names = activation_names() if key in ACTIVATION_KEYS and isinstance(value, str) else None
        if names is not None and value not in names:
            import difflib

            near = difflib.get_close_matches(value, names, n=1)
            hint = f"did you mean {near[0]!r}?" if near else f"valid: {sorted(names)}"
            return f"{option}.{key} {value!r} is no activation of the installed transformers; {hint}"
    if problem := _kv_heads_problem(option, config, found):
        return problem
    vocab = config.get("vocab_size")
    if tokenizer_size is not None and type(vocab) is int and 0 < vocab < tokenizer_size:
        return (
            f"{option}.vocab_size={vocab} is below the tokenizer's {tokenizer_size} tokens"
            " (each token id needs an embedding row); leave vocab_size out to take the tokenizer's"
        )
    return None


def _kv_keys(model_type: object, found: tuple[Path, ast.ClassDef] | None) -> tuple[str, str] | None:
    """``(heads key, kv heads key)`` of ``model_type``: :data:`KV_HEADS_DIVIDE`'s, else :data:`KV_KEYS`
    where its config class (``found``) takes both, else ``None``."""
    if isinstance(model_type, str) and model_type in KV_HEADS_DIVIDE:
        return KV_HEADS_DIVIDE[model_type]
    keys = _class_keys(found[0], found[1].name) if found is not None else None
    return KV_KEYS if keys is not None and set(KV_KEYS) <= set(keys) else None


def _kv_heads_problem(option: str, config: dict, found: tuple[Path, ast.ClassDef] | None) -> str | None:
    """Key/value heads that do not divide the attention heads (:data:`KV_HEADS_DIVIDE`), the heads
    the class's default where not given."""
    keys = _kv_keys(config.get("model_type"), found)
    if found is None or keys is None:
        return None
    heads_key, kv_key = keys
    kv = config.get(kv_key)
    heads = config.get(heads_key, _own_integers(found[1])[0].get(heads_key))
    if not all(type(v) is int and v > 0 for v in (heads, kv)) or heads % kv == 0:
        return None
    where = f"{option}.{heads_key}" if heads_key in config else f"{found[1].name}'s default {heads_key}"
    return (
        f"{option}.{kv_key}={kv} must divide {where}={heads} ({found[1].name}: each key/value head"
        f" serves {heads_key} / {kv_key} attention heads)"
    )
