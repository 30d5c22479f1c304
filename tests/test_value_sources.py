"""Every value a privacy budget line holds is followed by where it came from
(:func:`lightning_fed.config_precheck.with_sources`, red team 15 M8): for any placement of its options in two
``--config`` files and on the command line, each ``option=value`` is followed by the last place that set it
(``config '<file>'``, ``the command line``), or ``default`` where none did, and nothing else in the line changes.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from lightning_fed.config_precheck import with_sources
from lightning_fed.noise_calibration import client_level_span, refused_budget_line

OPTIONS = (
    "federation.rounds",
    "federation.sampling_rate",
    "federation.privacy.target_epsilon",
    "federation.privacy.delta",
)
PLACES = ("a.yaml", "b.yaml", "command line")


def _value(option: str, place: int) -> float | int:
    """A value of ``option`` that differs from place to place (a file that repeats a value does not set it)."""
    return {"federation.rounds": 2 + place, "federation.sampling_rate": 0.25 * (place + 1)}.get(option, 10.0**-place)


def _nested(option: str, value) -> dict:
    head, *rest = option.split(".")
    return {head: _nested(".".join(rest), value) if rest else value}


def _merge(into: dict, more: dict) -> dict:
    for key, value in more.items():
        into[key] = _merge(into.get(key, {}), value) if isinstance(value, dict) else value
    return into


@settings(max_examples=60, deadline=None)
@given(placed=st.fixed_dictionaries({o: st.sets(st.sampled_from(range(len(PLACES)))) for o in OPTIONS}))
def test_each_value_is_followed_by_the_last_place_that_set_it(placed):
    with tempfile.TemporaryDirectory() as folder:
        files = [Path(folder, name) for name in PLACES[:2]]
        args = [a for path in files for a in ("--config", str(path))]
        for i, path in enumerate(files):
            config: dict = {}
            for option, places in placed.items():
                _merge(config, _nested(option, _value(option, i)) if i in places else {})
            path.write_text(yaml.safe_dump(config))
        args += [f"--{o}={_value(o, 2)}" for o, places in placed.items() if 2 in places]
        federation = {"rounds": 3, "sampling": "poisson", "sampling_rate": 0.5}
        line = refused_budget_line(ValueError("why"), 0.01, 1e-5, 3, 0.5, over=client_level_span(federation))
        named = with_sources(args, line)
    for option, places in placed.items():
        last = max(places, default=None)
        source = "default" if last is None else "the command line" if last == 2 else f"config {str(files[last])!r}"
        assert re.search(rf"{re.escape(option)}=\S+ \({re.escape(source)}\)", named), (option, source, named)
    assert re.sub(r" \((?:config '[^']*'|the command line|default)\)", "", named) == line
