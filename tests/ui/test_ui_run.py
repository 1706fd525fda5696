"""`statestream.run(..., ui=...)` serves the live view as `statestream run --ui` does
(statestream._run.live_view, which both use), and so does `topology.ui` in the config:
the URL said on stderr at start, the page's JSON and /metrics answered during the
run, the socket closed when run() returns."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
import slow_words
from prometheus_client.parser import text_string_to_metric_families

import statestream
from statestream._errors import ConfigError
from statestream._results import RunResult

LINES = 600  # at slow_words' 3 ms a line: the run lasts about 2 s, whatever the machine
COMPONENTS = {"lines", "split", "count"}


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as reply:
        body: bytes = reply.read()
        return body


@pytest.mark.parametrize("how", ["argument", "config"])
def test_run_serves_the_live_view(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # slow_words reads corpus.txt here
    (tmp_path / "corpus.txt").write_text("".join(f"a b c{i}\n" for i in range(LINES)))
    topology = slow_words.topology()
    conf: dict[str, Any] = {"topology.state.checkpoint.interval.ms": 100}
    kwargs: dict[str, Any] = {"ui": 0} if how == "argument" else {}
    if how == "config":
        conf["topology.ui"] = 0
    done: list[RunResult | BaseException] = []

    def run() -> None:
        try:
            done.append(statestream.run(topology, conf, until_idle=True, **kwargs))
        except BaseException as exc:
            done.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    said = ""
    deadline = time.monotonic() + 60
    while "live view at " not in said and thread.is_alive() and time.monotonic() < deadline:
        said += capsys.readouterr().err
        time.sleep(0.01)
    said += capsys.readouterr().err
    assert "statestream: live view at http://127.0.0.1:" in said, (said, done)
    url = said.split("live view at ", 1)[1].split()[0]

    # During the run: the page's JSON names the topology's components, /metrics parses.
    body = orjson.loads(_get(url + "api/v1/topology"))
    assert {n["id"] for n in body["graph"]["nodes"]} == COMPONENTS
    families = {f.name for f in text_string_to_metric_families(_get(url + "metrics").decode())}
    assert "statestream_tuples_executed" in families
    assert thread.is_alive(), "the run ended before the view was read: make it longer"

    thread.join(120)
    assert len(done) == 1 and isinstance(done[0], RunResult), done
    assert done[0].components["count"].executed == 3 * LINES
    with pytest.raises(urllib.error.URLError):  # run() returned: nothing serves
        _get(url + "metrics")


def test_run_with_a_bad_ui_address_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"topology\.ui"):
        statestream.run(slow_words.topology(), until_idle=True, ui="nowhere")
