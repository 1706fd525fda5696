"""The systemd unit of the deployment guide (docs/guides/deployment.md), as far as it
runs without systemd: its ``ExecStart`` with its config file, in its
``WorkingDirectory`` with its ``Environment``, every path of the page moved under a
temporary directory. Each exit status the unit names is what the command gives:
SIGTERM (``KillSignal``) stops it cleanly with a status in ``SuccessExitStatus``
and every word committed; a SIGKILL and a start again count every word once (what
``Restart=on-failure`` relies on); a misspelt config key exits with the status of
``RestartPreventExitStatus``. The state is where the page's table says."""

from __future__ import annotations

import collections
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from docs_pages import DOCS, ROOT, blocks

pytestmark = pytest.mark.slow

PAGE = DOCS / "guides" / "deployment.md"
MARK = "tests/docs/test_deployment_unit.py"


def _page_blocks() -> dict[str, str]:
    found = {b.lang: b.code for b in blocks(PAGE) if b.marker == MARK}
    assert set(found) == {"ini", "yaml"}, found
    return found


def _unit(text: str) -> dict[str, list[str]]:
    """The unit's settings, each key with its values in order (systemd repeats keys)."""
    settings: dict[str, list[str]] = collections.defaultdict(list)
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings[key.strip()].append(value.strip())
    return settings


class Service:
    """The unit's ExecStart, started as systemd would start it (with the moves applied)."""

    def __init__(self, unit: dict[str, list[str]], moves: dict[str, str]) -> None:
        def moved(text: str) -> str:
            for page_path, here in moves.items():
                text = text.replace(page_path, here)
            return text

        self.argv = shlex.split(moved(unit["ExecStart"][0]))
        env = dict(os.environ)
        for assignment in unit.get("Environment", []):
            key, _, value = assignment.partition("=")
            env[key] = value
        self.cwd = Path(moved(unit["WorkingDirectory"][0]))
        self.cwd.mkdir(parents=True, exist_ok=True)  # StateDirectory= creates it
        self.env = env
        self.proc: subprocess.Popen[str] | None = None
        self.reader: threading.Thread | None = None
        self.lines: list[str] = []
        self.started = threading.Event()

    def start(self, *extra: str) -> None:
        self.lines = []
        self.started.clear()
        self.proc = subprocess.Popen(
            [*self.argv, *extra], cwd=self.cwd, env=self.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self.reader.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.lines.append(line)
            if line.startswith("statestream: running "):
                self.started.set()
        self.started.set()

    def wait_running(self, seconds: float = 2.0) -> None:
        """Until it said it runs, then ``seconds`` more (the corpus is read in well under
        a second); it must still be running: a service does not end on its own."""
        assert self.started.wait(60)
        time.sleep(seconds)
        assert self.proc is not None and self.proc.poll() is None, "".join(self.lines)

    def wait(self) -> int:
        """Its exit status, once its stderr is read to the end (and closed)."""
        assert self.proc is not None and self.reader is not None
        code = self.proc.wait(60)
        self.reader.join(10)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        return code

    def stop(self, sig: int) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = self.wait()
        return 128 + sig if code == -sig else code


def test_the_unit_command_line_runs_stops_and_restarts_as_the_unit_says(
    tmp_path: Path,
) -> None:
    page = _page_blocks()
    unit = _unit(page["ini"])
    moves = {
        "/opt/statestream/venv/bin/python3": sys.executable,
        "/opt/statestream/app/wordcount.py": str(ROOT / "examples" / "wordcount.py"),
        "/etc/statestream/": f"{tmp_path}/etc/statestream/",
        "/var/lib/statestream": f"{tmp_path}/var/lib/statestream",
    }
    config = tmp_path / "etc" / "statestream" / "wordcount.yaml"
    config.parent.mkdir(parents=True)
    text = page["yaml"]
    for page_path, here in moves.items():
        text = text.replace(page_path, here)
    config.write_text(text)
    assert unit["KillSignal"] == ["SIGTERM"]
    success = {int(c) for v in unit["SuccessExitStatus"] for c in v.split()}
    no_restart = {int(c) for v in unit["RestartPreventExitStatus"] for c in v.split()}
    service = Service(unit, moves)
    state = tmp_path / "var" / "lib" / "statestream" / "wordcount"

    # systemctl stop: a clean stop, a success for systemd.
    service.start()
    service.wait_running()
    assert service.stop(signal.SIGTERM) in success, "".join(service.lines)
    assert any(line.startswith("component ") for line in service.lines)  # the summary
    expected = collections.Counter((ROOT / "examples" / "corpus.txt").read_text().split())
    assert _counts(config) == expected

    # A crash, then Restart=on-failure: the restart resumes, nothing counted twice.
    service.start()
    service.wait_running(0.5)
    assert service.stop(signal.SIGKILL) == 128 + signal.SIGKILL
    service.start()
    service.wait_running()
    assert "reading from the start" not in "".join(service.lines)
    assert service.stop(signal.SIGTERM) in success
    assert _counts(config) == expected

    # Where the page says the state lives.
    assert (state / "state.db").is_file()
    assert (state / "state.db.wordcount.lock").is_file()

    # A mistake in the config: not restarted.
    service.start("--set", "topology.state.provder=sqlite")
    assert service.wait() in no_restart, "".join(service.lines)


def _counts(config: Path) -> dict[str, int]:
    dump = subprocess.run(
        [sys.executable, "-m", "statestream", "state", "dump", "--component", "count",
         "--config", str(config)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return {e["key"]: e["value"] for e in map(json.loads, dump.stdout.splitlines())}
