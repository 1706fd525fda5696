"""The storm.yaml table of docs/guides/coming-from-storm.md holds to the config schema:
each Storm key it says statestream has (or a pattern like ``topology.bolts.window.*``)
is a key of statestream/defaults.yaml whose entry says what Storm's is, and each key
of its last row ("none": Storm's cluster keys) is one the schema does not have, so a
config file holding it is refused."""

from __future__ import annotations

import re

import yaml
from docs_pages import DOCS, ROOT

PAGE = DOCS / "guides" / "coming-from-storm.md"
DEFAULTS = ROOT / "statestream" / "defaults.yaml"


def _rows() -> list[tuple[list[str], str]]:
    """The table's rows after its header: the keys of the first column, the second."""
    text = PAGE.read_text()
    table = text.split("| storm.yaml key | here |", 1)[1].split("\n\n", 1)[0]
    rows = []
    for line in table.strip().splitlines()[1:]:  # the |---| line first
        first, second = line.strip("|").split("|", 1)
        rows.append((re.findall(r"`([^`]+)`", first), second.strip()))
    return rows


def _matches(pattern: str, keys: list[str]) -> list[str]:
    rx = re.compile(re.escape(pattern).replace(r"\*", r"[\w.]+") + "$")
    return [k for k in keys if rx.match(k)]


def test_the_storm_keys_the_page_names_are_what_the_schema_has() -> None:
    keys = list(yaml.safe_load(DEFAULTS.read_text()))
    text = DEFAULTS.read_text()
    rows = _rows()
    assert len(rows) > 10
    *kept, (cluster, said) = rows
    for names, _ in kept:
        for name in names:
            found = _matches(name, keys)
            assert found, f"{name} is not a key of defaults.yaml"
            for key in found:
                entry = text.split(f"\n{key}:", 1)[0].rsplit("\n\n", 1)[1]
                assert "# Storm: " in entry, f"{key}: defaults.yaml says nothing of Storm's"
    assert said.startswith("none")
    for name in cluster:
        assert _matches(name, keys) == [], f"{name} is a key of defaults.yaml"
