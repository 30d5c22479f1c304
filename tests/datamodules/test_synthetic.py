import pytest

from lightning_fed.datamodules.synthetic import (
    INSTRUCTION_FAMILIES,
    PREFERENCE_GROUPS,
    SENTIMENT_WORDS,
    SIGN_OFFS,
    SYNTHETIC,
    apply_family,
    planted_hard_preferences,
    planted_instructions,
    planted_preferences,
)

POSITIVE = {pair[0] for pair in SENTIMENT_WORDS}
NEGATIVE = {pair[1] for pair in SENTIMENT_WORDS}
FORMAL = {pair[0] for pair in SIGN_OFFS}
CASUAL = {pair[1] for pair in SIGN_OFFS}


def _split_sign_off(text: str) -> tuple[str, str]:
    """(body, sign-off) of a response."""
    (sign_off,) = [s for s in FORMAL | CASUAL if text.endswith(" " + s)]
    return text[: -len(sign_off) - 1], sign_off


def _word_diff(a: str, b: str) -> list[tuple[str, str]]:
    """The differing words of two texts with the same number of words."""
    wa, wb = a.split(), b.split()
    assert len(wa) == len(wb)
    return [(x.rstrip(".,"), y.rstrip(".,")) for x, y in zip(wa, wb) if x != y]


def test_registry():
    assert SYNTHETIC == {
        "preferences": planted_preferences,
        "instructions": planted_instructions,
        "hard_preferences": planted_hard_preferences,
    }


def test_hard_preferences_knobs():
    plain = planted_hard_preferences(num_clients=2, examples_per_client=200, seed=1)
    for row in plain:  # knobs off: only the planted sentiment word differs, on the group's side
        ((w, l),) = [(w, l) for w, l in _word_diff(row["chosen"], row["rejected"]) if w in POSITIVE | NEGATIVE]
        assert (w in POSITIVE) == (row["group"] == "positive")
        assert _split_sign_off(row["chosen"])[1] == _split_sign_off(row["rejected"])[1]
    hard = planted_hard_preferences(
        num_clients=2, examples_per_client=200, seed=1, distractor=1.0, purity=0.8, label_noise=0.1
    )
    assert all(
        _split_sign_off(r["chosen"])[1] != _split_sign_off(r["rejected"])[1] for r in hard
    )  # the distractor differs
    agree = [  # does the chosen response carry the group's side of the sentiment word?
        any(
            w in (POSITIVE if r["group"] == "positive" else NEGATIVE)
            for w, _ in _word_diff(_split_sign_off(r["chosen"])[0], _split_sign_off(r["rejected"])[0])
        )
        for r in hard
    ]
    assert agree == [
        f != fl for f, fl in zip(hard["follows_group"], hard["flipped"])
    ]  # chosen has the group's side iff it follows xor flipped
    assert 0.7 < sum(hard["follows_group"]) / 400 < 0.9 and 0.05 < sum(hard["flipped"]) / 400 < 0.15
    with pytest.raises(
        ValueError, match=r"`label_noise` must be in \[0, 0.5\), got 0.5; `purity` must be in \(0.5, 1\], got 0.5"
    ):
        planted_hard_preferences(label_noise=0.5, purity=0.5)


def test_preferences_shape_and_determinism():
    ds = planted_preferences(num_clients=4, examples_per_client=16, seed=3)
    assert ds.column_names == ["prompt", "chosen", "rejected", "client", "group"]
    assert len(ds) == 64
    assert ds["client"][:] == [k for k in range(4) for _ in range(16)]
    assert planted_preferences(num_clients=4, examples_per_client=16, seed=3).to_dict() == ds.to_dict()
    other = planted_preferences(num_clients=4, examples_per_client=16, seed=4)
    assert other["chosen"][:] != ds["chosen"][:]


def test_preferences_groups_round_robin():
    groups = ("positive", "negative", "formal")
    ds = planted_preferences(num_clients=7, examples_per_client=2, groups=groups)
    for client, group in zip(ds["client"], ds["group"]):
        assert group == groups[client % 3]


def test_preferences_texts_short_and_varied():
    ds = planted_preferences(num_clients=8, examples_per_client=64, groups=tuple(PREFERENCE_GROUPS))
    for column in ("prompt", "chosen", "rejected"):
        assert max(len(t) for t in ds[column]) < 60
        assert min(len(t.strip()) for t in ds[column]) > 0
    assert len(set(ds["prompt"])) > 150  # many distinct prompts: held-out rows test generalisation


@pytest.mark.parametrize("group", list(PREFERENCE_GROUPS))
def test_preferences_differ_only_by_planted_property(group):
    ds = planted_preferences(num_clients=2, examples_per_client=100, groups=(group,), seed=1)
    preferred = {"positive": POSITIVE, "negative": NEGATIVE, "formal": FORMAL, "casual": CASUAL}[group]
    sentiment_pairs = set(SENTIMENT_WORDS) | {(n, p) for p, n in SENTIMENT_WORDS}
    sign_off_pairs = set(SIGN_OFFS) | {(c, f) for f, c in SIGN_OFFS}
    for row in ds:
        chosen, rejected = row["chosen"], row["rejected"]
        assert len(chosen) == len(rejected)
        (body_c, sign_c), (body_r, sign_r) = _split_sign_off(chosen), _split_sign_off(rejected)
        if group in ("positive", "negative"):
            assert sign_c == sign_r  # the non-planted property is shared
            ((word_c, word_r),) = _word_diff(body_c, body_r)
            assert (word_c, word_r) in sentiment_pairs and word_c in preferred
        else:
            assert body_c == body_r  # the non-planted property is shared
            assert (sign_c, sign_r) in sign_off_pairs and sign_c in preferred
            assert {w.rstrip(".,") for w in body_c.split()} & (POSITIVE | NEGATIVE)


def test_preferences_both_background_sides_occur():
    ds = planted_preferences(num_clients=1, examples_per_client=200, groups=("positive",))
    assert any(c.endswith(tuple(FORMAL)) for c in ds["chosen"])
    assert any(c.endswith(tuple(CASUAL)) for c in ds["chosen"])


@pytest.mark.parametrize("pair", [("positive", "negative"), ("formal", "casual")])
def test_opposite_groups_swap_on_same_prompts(pair):
    a = planted_preferences(num_clients=3, examples_per_client=20, groups=(pair[0],), seed=5)
    b = planted_preferences(num_clients=3, examples_per_client=20, groups=(pair[1],), seed=5)
    assert a["prompt"][:] == b["prompt"][:]
    assert a["chosen"][:] == b["rejected"][:]
    assert a["rejected"][:] == b["chosen"][:]


def test_preferences_errors():
    with pytest.raises(ValueError, match="'angry'") as info:
        planted_preferences(groups=("positive", "angry"))
    assert all(name in str(info.value) for name in PREFERENCE_GROUPS)
    with pytest.raises(ValueError, match="num_clients"):
        planted_preferences(num_clients=0)


def test_instructions_outputs_are_correct_transformations():
    ds = planted_instructions(num_clients=10, examples_per_client=20, families_per_client=3)
    assert ds.column_names == ["instruction", "input", "output", "client", "family"]
    for row in ds:
        wording, transform = INSTRUCTION_FAMILIES[row["family"]]
        assert row["instruction"] == wording
        assert row["output"] == transform(row["input"]) == apply_family(row["family"], row["input"])
        assert 3 <= len(row["input"].split()) <= 5
        assert len(row["input"]) < 60 and len(row["output"]) < 60
    assert len(INSTRUCTION_FAMILIES) >= 8
    assert len(set(ds["instruction"])) == len(INSTRUCTION_FAMILIES)  # fixed wording per family


def test_instruction_families_by_hand():
    text = "tiger apple stone"
    assert apply_family("reverse_words", text) == "stone apple tiger"
    assert apply_family("uppercase", text) == "TIGER APPLE STONE"
    assert apply_family("last_word", text) == "stone"
    assert apply_family("sort_words", text) == "apple stone tiger"
    assert apply_family("count_words", text) == "3"
    assert apply_family("repeat_first", text) == "tiger tiger"
    assert apply_family("replace_vowels", text) == "t*g*r *ppl* st*n*"
    assert apply_family("first_letters", text) == "tas"
    assert apply_family("capitalize", text) == "Tiger Apple Stone"
    assert apply_family("drop_first", text) == "apple stone"


def test_instructions_family_assignment_shared_and_balanced():
    ds = planted_instructions(num_clients=8, examples_per_client=10, families_per_client=2)
    names = list(INSTRUCTION_FAMILIES)
    per_client: dict[int, list[str]] = {}
    for client, family in zip(ds["client"], ds["family"]):
        per_client.setdefault(client, []).append(family)
    for k, families in per_client.items():
        expected = {names[(2 * k + j) % len(names)] for j in range(2)}
        assert set(families) == expected
        assert all(families.count(f) == 5 for f in expected)
    owners = {}
    for k, families in per_client.items():
        for f in set(families):
            owners.setdefault(f, set()).add(k)
    assert any(len(o) > 1 for o in owners.values())  # families are shared across clients


def test_instructions_held_out_and_subset():
    held = ["count_words", "uppercase"]
    ds = planted_instructions(num_clients=6, examples_per_client=8, held_out_families=held)
    assert not set(ds["family"]) & set(held)
    only = planted_instructions(num_clients=2, examples_per_client=8, families=held, families_per_client=1)
    assert set(only["family"]) == set(held)


def test_instructions_determinism():
    a = planted_instructions(num_clients=3, examples_per_client=8, seed=0)
    assert a.to_dict() == planted_instructions(num_clients=3, examples_per_client=8, seed=0).to_dict()
    assert a["input"][:] != planted_instructions(num_clients=3, examples_per_client=8, seed=1)["input"][:]


def test_instructions_errors():
    with pytest.raises(ValueError, match="'translate'") as info:
        planted_instructions(families=["uppercase", "translate"])
    assert "reverse_words" in str(info.value)
    with pytest.raises(ValueError, match="'shout'"):
        planted_instructions(held_out_families=["shout"])
    with pytest.raises(ValueError, match="families_per_client"):
        planted_instructions(families=["uppercase"], families_per_client=2)
    with pytest.raises(ValueError, match="no family left"):
        planted_instructions(families=["uppercase"], held_out_families=["uppercase"])
