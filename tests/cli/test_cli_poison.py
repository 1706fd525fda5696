"""Poison tuples end to end (issue 12): ``statestream run --until-idle`` of the word
count over a file in which lines holding one poison word make the split bolt raise.

The run ends by itself; the dead-letter file holds exactly those lines, with their
exception; every other word's count is exact; in exactly-once and at-least-once
mode, on sqlite and on redis. Then a SIGKILL between a message's last attempt and
its dead-letter write, and ``statestream deadletter show|replay``.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from statestream.testing import random_text

ROOT = Path(__file__).resolve().parents[2]
POISON = "POISON"

TOPOLOGY = f'''
"""The word count of examples/wordcount.py with a split bolt that refuses one word."""
import sys
sys.path.insert(0, {str(ROOT / "examples")!r})

from wordcount import WordCount

from statestream import BasicBolt, FileSpout, TopologyBuilder


class PoisonSplit(BasicBolt):
    def prepare(self, conf, context):
        super().prepare(conf, context)
        self.poison = conf.get("wordcount.poison")

    def execute(self, tuple, collector):
        offset, line = tuple.values
        words = line.split()
        if self.poison and self.poison in words:
            raise ValueError(f"poison word in line {{offset}}")
        for word in words:
            collector.emit([word])

    def declare_output_fields(self, declarer):
        declarer.declare(["word"])


def topology():
    builder = TopologyBuilder("wordcount")
    builder.set_spout("sentences", FileSpout(path_key="wordcount.input", resume=True))
    builder.set_bolt("split", PoisonSplit(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", ["word"])
    return builder.build()
'''


def redis_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5):
            return True
    except OSError:
        return False


class Setup:
    """A poisoned input, the topology file and a config for one provider and mode."""

    def __init__(self, tmp_path: Path, provider: str, exactly_once: bool, lines: int = 400):
        self.tmp = tmp_path
        self.input = tmp_path / "in.txt"
        random_text(self.input, lines, words_per_line=6, vocabulary=60, seed=3)
        text = self.input.read_text().splitlines()
        self.poisoned = set(range(5, lines, 47))  # 9 lines of 400
        for n in self.poisoned:
            words = text[n].split()
            words.insert(n % len(words), POISON)
            text[n] = " ".join(words)
        self.input.write_text("\n".join(text) + "\n")
        self.lines = {n: text[n] for n in self.poisoned}
        self.expected: collections.Counter[str] = collections.Counter()
        for n, line in enumerate(text):
            if n not in self.poisoned:
                self.expected.update(line.split())
        self.topology = tmp_path / "poisoned_wordcount.py"
        self.topology.write_text(TOPOLOGY)
        self.output = tmp_path / "counts.jsonl"
        state: dict[str, Any]
        if provider == "sqlite":
            state = {"path": str(tmp_path / "data" / "state.db"), "synchronous": "normal"}
            self.deadletters = tmp_path / "data" / "deadletter.jsonl"  # beside the state
            deadletter_path = None
        else:
            state = {
                "host": "127.0.0.1",
                "port": 6379,
                "key_prefix": f"sspoison:{uuid.uuid4().hex}:",
            }
            self.deadletters = tmp_path / "dead.jsonl"
            deadletter_path = str(self.deadletters)
        self.config = tmp_path / "config.json"
        conf = {
            "topology.state.provider": provider,
            "topology.state.provider.config": state,
            "topology.state.checkpoint.interval.ms": 100,
            "statestream.state.exactly.once": exactly_once,
            "statestream.retry.initial.ms": 5,
            "statestream.deadletter.path": deadletter_path,
            "wordcount.input": str(self.input),
            "wordcount.output": str(self.output),
            "wordcount.poison": POISON,
        }
        self.config.write_bytes(orjson.dumps(conf))
        self.key_prefix = state.get("key_prefix")

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "statestream", "run", str(self.topology), "--until-idle",
             "--no-progress", "--config", str(self.config), *args],
            capture_output=True,
            text=True,
            timeout=240,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )  # fmt: skip

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "statestream", *args, "--config", str(self.config)],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def dead(self) -> list[dict[str, Any]]:
        if not self.deadletters.exists():
            return []
        return [orjson.loads(line) for line in self.deadletters.read_bytes().splitlines()]

    def counts(self) -> collections.Counter[str]:
        counts: collections.Counter[str] = collections.Counter()
        for line in self.output.read_bytes().splitlines():
            row = orjson.loads(line)
            assert row["word"] not in counts
            counts[row["word"]] = row["count"]
        return counts

    def cleanup(self) -> None:
        if self.key_prefix:
            import redis

            client = redis.Redis(host="127.0.0.1", port=6379)
            keys = list(client.scan_iter(match=f"{self.key_prefix}*"))
            if keys:
                client.delete(*keys)
            client.close()


PROVIDERS = ["sqlite", pytest.param("redis", marks=pytest.mark.redis)]


@pytest.fixture(params=PROVIDERS)
def provider(request: pytest.FixtureRequest) -> str:
    if request.param == "redis" and not redis_up():
        if os.environ.get("CI"):
            pytest.fail("no Redis server on 127.0.0.1:6379, and CI must run the redis tests")
        pytest.skip("no Redis server on 127.0.0.1:6379")
    return str(request.param)


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "at-least-once"])
def test_until_idle_ends_with_the_poison_lines_dead_lettered_and_every_other_count_exact(
    tmp_path: Path, provider: str, exactly_once: bool
) -> None:
    s = Setup(tmp_path, provider, exactly_once)
    try:
        proc = s.run()
        # Exit 3: finished, with the split bolt's errors reported.
        assert proc.returncode == 3, proc.stderr
        # The start line, after the spout's line saying where it resumes.
        start = [line for line in proc.stderr.splitlines() if "statestream: running" in line]
        assert len(start) == 1 and f"dead letters go to {s.deadletters}" in start[0]
        dead = s.dead()
        assert sorted(r["msg_id"] for r in dead) == sorted(s.poisoned)
        for r in dead:
            assert r["values"] == [r["msg_id"], s.lines[r["msg_id"]]]
            if exactly_once:
                # Retried where it failed, then dead-lettered at that bolt: the
                # tuple itself, from its source, with its message's id.
                assert (r["topology"], r["spout"], r["at"], r["source"]) == (
                    "wordcount",
                    "split",
                    "split",
                    "sentences",
                )
            else:
                assert (r["topology"], r["spout"], r["task"]) == ("wordcount", "sentences", 0)
            assert (r["component"], r["error_type"]) == ("split", "ValueError")
            assert r["error"] == f"poison word in line {r['msg_id']}"
            assert r["attempts"] == 5
        assert s.counts() == s.expected
        # The traceback once per task, not once per attempt.
        assert proc.stderr.count("Traceback") <= 2
    finally:
        s.cleanup()


@pytest.mark.parametrize("when", ["before-write", "after-write"])
@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "at-least-once"])
def test_a_sigkill_around_the_dead_letter_write_leaves_it_once_or_retried(
    tmp_path: Path, when: str, exactly_once: bool
) -> None:
    s = Setup(tmp_path, "sqlite", exactly_once)
    killed = s.run(env={"SSTREAM_TEST_DEADLETTER_KILL": when})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    after_kill = s.dead()
    # Killed at the first dead letter: before its write the file has nothing,
    # after it the line is there (written and fsynced before it was settled).
    assert len(after_kill) == (0 if when == "before-write" else 1)
    proc = s.run()
    assert proc.returncode == 3, proc.stderr
    dead = s.dead()
    ids = [r["msg_id"] for r in dead]
    assert sorted(ids) == sorted(s.poisoned)  # every one, none twice
    if exactly_once:
        assert s.counts() == s.expected
    else:
        # At-least-once may count the lines since the last saved position again;
        # it never loses one.
        counts = s.counts()
        assert all(counts[w] >= n for w, n in s.expected.items())


def test_deadletter_show_and_replay_feed_the_messages_back_into_the_next_run(
    tmp_path: Path,
) -> None:
    s = Setup(tmp_path, "sqlite", True)
    assert s.run().returncode == 3

    shown = s.cli("deadletter", "show")
    assert shown.returncode == 0, shown.stderr
    table = shown.stdout.splitlines()
    assert table[0].split()[:4] == ["topology", "spout", "msg", "id"]
    assert len(table) == 1 + len(s.poisoned)
    assert all("ValueError: poison word in line" in row for row in table[1:])
    as_json = s.cli("deadletter", "show", "--json")
    assert [orjson.loads(line)["status"] for line in as_json.stdout.splitlines()] == ["dead"] * len(
        s.poisoned
    )

    replay = s.cli("deadletter", "replay")
    assert replay.returncode == 0, replay.stderr
    assert f"{len(s.poisoned)} dead letters marked for replay" in replay.stdout

    # The bolt is fixed (no poison word any more): the next run counts those lines.
    proc = s.run("--set", "wordcount.poison=")
    assert proc.returncode == 0, proc.stderr
    assert {r["status"] for r in s.dead()} == {"replayed"}
    everything: collections.Counter[str] = collections.Counter()
    for line in s.input.read_text().splitlines():
        everything.update(line.split())
    assert s.counts() == everything
