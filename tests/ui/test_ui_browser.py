"""The live view in a real browser: Debian's chromium, driven by selenium through
chromedriver (.ci/run installs both), looks at `statestream run --ui` while the
run runs, in one process and with ``topology.workers: 2`` (the supervisor serves
the view over both workers), and at a Spark ``local[2]`` run's driver: every
component is in the graph, the executed count rises between two reads a second
apart (on Spark, between two batches), and the browser's console has no error."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statestream.testing import random_text

TESTS = Path(__file__).resolve().parent.parent
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
COMPONENTS = {"lines", "split", "count"}  # tests/ui/slow_words.py


class LiveRun:
    """`statestream run tests/ui/slow_words.py --ui 0` in ``cwd``, its stderr collected;
    ``args``: more options (``--set topology.workers=2``); ``topology``: another file
    of tests/ui."""

    def __init__(
        self, cwd: Path, args: tuple[str, ...] = (), topology: str = "slow_words.py"
    ) -> None:
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        self.args = args
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "statestream",
                "run",
                str(TESTS / "ui" / topology),
                "--until-idle",
                "--ui",
                "0",
                "--no-progress",
                *args,
            ],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.url_seen = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if "live view at " in line:
                self.url_seen.set()
        self.url_seen.set()  # the run ended: url() says why

    def url(self) -> str:
        self.url_seen.wait(60)
        found = [x for x in self.lines if "live view at " in x]
        assert found, "no live view line:\n" + "".join(self.lines)
        line = found[0]
        return line.split("live view at ", 1)[1].strip()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(60)


# Two workers share a store: sqlite, in the run's directory.
WORKERS_2 = (
    "--set",
    "topology.workers=2",
    "--set",
    "topology.state.provider=sqlite",
    "--set",
    "topology.state.provider.config={path: state.db}",
)


@pytest.fixture(params=[(), WORKERS_2], ids=["one-process", "workers-2"])
def live_run(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LiveRun]:
    # Long enough to outlast the test (a few ms a line); the test stops it.
    random_text(tmp_path / "corpus.txt", 50_000, words_per_line=8, vocabulary=50)
    run = LiveRun(tmp_path, request.param)
    try:
        yield run
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait()
        run.reader.join(10)
        assert run.proc.stderr is not None
        run.proc.stderr.close()


def chromium(user_data: Path) -> Any:
    """A headless chromium as root may run it, with its console log kept."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    assert not missing, (
        f"{missing} not found: the browser test needs Debian's chromium and chromium-driver "
        "(apt-get install chromium chromium-driver; .ci/run installs them)"
    )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        f"--user-data-dir={user_data}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


def _text(driver: Any, selector: str) -> str | None:
    """The text of the first element ``selector`` finds, read in one script: the page
    redraws its tables every second, so an element found in one call may be gone
    (stale) by the next."""
    return driver.execute_script(  # type: ignore[no-any-return]
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
        selector,
    )


def _executed(driver: Any, component: str) -> int:
    text = _text(driver, f'#components tr[data-id="{component}"] td.executed')
    return int(text.replace(",", "")) if text and text != "-" else 0


def _check_page(driver: Any, url: str, running: Any, shot: Path | None = None) -> None:
    """Every component drawn with its edges, the count's executed rising between two
    reads (``running()`` still true after the second), keys changed in the checkpoint
    strip, no SEVERE console entry."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    wait = WebDriverWait(driver, 60)
    wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#graph g.node")) >= len(COMPONENTS))
    drawn = {
        e.get_attribute("data-id") for e in driver.find_elements(By.CSS_SELECTOR, "#graph g.node")
    }
    assert drawn == COMPONENTS
    edges = {
        (e.get_attribute("data-source"), e.get_attribute("data-target"))
        for e in driver.find_elements(By.CSS_SELECTOR, "#graph g.edge")
    }
    assert edges == {("lines", "split"), ("split", "count")}
    wait.until(lambda d: _executed(d, "count") > 0)
    first = _executed(driver, "count")
    time.sleep(1)  # two reads a second apart; the page polls once a second
    wait.until(lambda d: _executed(d, "count") > first)
    assert running(), "the run ended before the second read"
    # The checkpoint strip says how many keys the count's tasks changed (and the bytes
    # they sent the store, where the runtime knows it), what that is in its legend,
    # and each task's figures in its tooltip.
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#checkpoints .committed .keys"))
    keys, tip = driver.execute_script(
        "const e = document.querySelector('#checkpoints .committed');"
        "return [e.querySelector('.keys').textContent, e.title];"
    )
    assert (
        re.fullmatch(r"[\d,]+ keys changed( · [\d,.]+ (bytes|kB|MB|GB))?", keys)
        and int(keys.split()[0].replace(",", "")) > 0
    ), keys
    total = keys.split()[0]
    assert f"{total} keys changed (written by its commit), per task:" in tip, tip
    assert re.search(r"\n  count-0: [\d,]+ keys", tip) and "count-1: " in tip, tip
    legend = driver.find_element(By.ID, "checkpoints-legend")
    assert legend.is_displayed() and "not the keys the state holds" in legend.text
    if shot is not None:
        driver.save_screenshot(str(shot))
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []


def test_the_page_shows_every_component_and_counts_rising_without_console_errors(
    live_run: LiveRun, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    url = live_run.url()
    driver = chromium(tmp_path / "chromium-profile")
    try:
        workers = "topology.workers=2" in live_run.args
        shot = (
            None
            if workers
            else Path(os.environ.get("LIVE_VIEW_SCREENSHOT", tmp_path / "live-view.png"))
        )
        _check_page(driver, url, lambda: live_run.proc.poll() is None, shot)
        rows = driver.find_elements(By.CSS_SELECTOR, "#workers tbody tr")
        assert len(rows) == (2 if workers else 0)
        assert not driver.find_element(By.ID, "spark-section").is_displayed()
    finally:
        driver.quit()
    assert live_run.stop() == 130, "".join(live_run.lines)


# Where each label of the graph is drawn against the boxes: per node, the box and
# its lines of text; per edge, its labels; all in page pixels.
_LABELS = """
const box = (e) => { const r = e.getBoundingClientRect();
  return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
return {
  nodes: [...document.querySelectorAll('#graph g.node')].map((g) => ({
    id: g.dataset.id, title: g.querySelector('title').textContent,
    rect: box(g.querySelector('rect')),
    texts: [...g.querySelectorAll('text')].map((t) => ({text: t.textContent, box: box(t)})),
  })),
  edges: [...document.querySelectorAll('#graph g.edge text')].map((t) => ({
    text: t.textContent, box: box(t)})),
};
"""


def _inside(inner: dict[str, float], outer: dict[str, float]) -> bool:
    return (
        inner["left"] >= outer["left"]
        and inner["right"] <= outer["right"]
        and inner["top"] >= outer["top"]
        and inner["bottom"] <= outer["bottom"]
    )


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return not (
        a["right"] <= b["left"]
        or b["right"] <= a["left"]
        or a["bottom"] <= b["top"]
        or b["bottom"] <= a["top"]
    )


def test_long_names_stay_inside_their_boxes_and_are_whole_in_the_tooltip(
    tmp_path: Path,
) -> None:
    """Component ids and class names longer than a node can hold are cut with an
    ellipsis inside the box (the counts too), whole in the node's tooltip, and no
    edge label covers a node."""
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.ui import long_names

    random_text(tmp_path / "corpus.txt", 20_000, words_per_line=8, vocabulary=50)
    run = LiveRun(tmp_path, topology="long_names.py")
    driver = None
    try:
        driver = chromium(tmp_path / "chromium-profile")
        driver.get(run.url())
        # Drawn, with counts under way (the widest lines a run has).
        WebDriverWait(driver, 60).until(lambda d: _executed(d, long_names.COUNT) > 0)
        labels = driver.execute_script(_LABELS)
        driver.save_screenshot(
            os.environ.get("LIVE_VIEW_LONG_NAMES_SCREENSHOT", str(tmp_path / "long-names.png"))
        )
        nodes = {n["id"]: n for n in labels["nodes"]}
        assert set(nodes) == {long_names.SPOUT, long_names.SPLIT, long_names.COUNT}
        for node in nodes.values():
            spilled = [t["text"] for t in node["texts"] if not _inside(t["box"], node["rect"])]
            assert spilled == [], (node["id"], node["rect"], node["texts"])
            # The id and class: shown whole, or cut with an ellipsis and whole in the tooltip.
            shown_id, shown_class = (t["text"] for t in node["texts"][:2])
            assert shown_id == node["id"] or (
                shown_id.endswith("…") and node["id"].startswith(shown_id[:-1])
            ), shown_id
            assert node["title"].startswith(f"{node['id']}: "), node["title"]
            assert shown_class.rstrip("…").split(" \u00d7")[0] in node["title"]
        assert nodes[long_names.SPOUT]["texts"][0]["text"].endswith("…")  # too long to fit
        assert nodes[long_names.SPLIT]["texts"][0]["text"] == long_names.SPLIT  # fits
        covered = [
            (e["text"], n["id"])
            for e in labels["edges"]
            for n in nodes.values()
            if _overlap(e["box"], n["rect"])
        ]
        assert covered == []
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
    finally:
        if driver is not None:
            driver.quit()
        if run.proc.poll() is None:
            run.proc.kill()
        run.proc.wait(60)
        run.reader.join(10)
        assert run.proc.stderr is not None
        run.proc.stderr.close()


@pytest.mark.spark
def test_the_page_on_a_spark_run_shows_its_batches_jobs(
    spark_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Spark driver serves the view: counts rise batch by batch, every component
    has its sampled latency, and the Spark section lists the batches' jobs."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from statestream._config import Config
    from statestream._run import live_view, load_topology
    from statestream.runtime.spark import SparkRuntime

    random_text(tmp_path / "corpus.txt", 20_000, words_per_line=8, vocabulary=50)
    monkeypatch.chdir(tmp_path)  # slow_words reads corpus.txt where it runs
    topology = load_topology(str(TESTS / "ui" / "slow_words.py"))
    conf = Config(
        {
            "topology.ui": "0",
            "topology.stats.sample.rate": 1.0,
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        }
    )
    rt = SparkRuntime(topology, conf, spark=spark_session, batch_size=150)
    said: list[str] = []
    rt.open()
    view = live_view(rt, topology, conf, said.append)
    url = said[0].split("live view at ", 1)[1].strip()
    ended: list[Any] = []
    with view:
        # The browser first: without one (no chromedriver) the test fails before any
        # run starts. The run started, it is stopped and joined however the test
        # ends: left running, it read corpus.txt from the directory monkeypatch had
        # restored and raised inside whatever test ran next (issue 48).
        driver = chromium(tmp_path / "chromium-profile")
        thread = threading.Thread(target=lambda: ended.append(rt.run(duration=120)), daemon=True)
        try:
            thread.start()
            _check_page(driver, url, thread.is_alive)
            wait = WebDriverWait(driver, 30)
            wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#spark tbody tr")) >= 2)
            assert driver.find_element(By.ID, "spark-section").is_displayed()
            assert _text(driver, "#spark tbody tr td.job-status") == "SUCCEEDED"
            done, tasks = str(_text(driver, "#spark tbody tr td.done")).split("/")
            assert done == tasks and int(tasks) > 0
            latency = {
                cid: _text(driver, f'#components tr[data-id="{cid}"] td.latency')
                for cid in COMPONENTS
            }
            assert all(re.fullmatch(r"[\d.,]+", v or "") for v in latency.values()), latency
            driver.save_screenshot(str(tmp_path / "live-view-spark.png"))  # to look at
            errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
            assert errors == []
        finally:
            try:
                rt.stop()
                if thread.is_alive():
                    thread.join(60)
            finally:
                driver.quit()
    assert ended and ended[0].reason == "stopped"
