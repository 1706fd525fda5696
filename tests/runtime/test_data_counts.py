"""What a run counts in the user's components is their data, on every runtime.

Checkpoint tuples travel through every bolt of a stateful topology (each bolt
executes, forwards and acks them), but they are the protocol's traffic: a
bolt that executed 600 words must not report 612 acked.
"""

from __future__ import annotations

from pathlib import Path

from runtime_harness import Runner
from word_bolts import word_count

LINES = 200


def test_counts_are_data_tuples_only(runner: Runner, tmp_path: Path) -> None:
    corpus = tmp_path / "in.txt"
    corpus.write_text("".join(f"a b c{i}\n" for i in range(LINES)))
    words = 3 * LINES
    # A checkpoint every 10 ms of the (fake) clock, a batch of 50 lines on Spark:
    # several checkpoints pass through the bolts.
    result = runner.run(
        word_count("counts", corpus),
        {"topology.state.checkpoint.interval.ms": 10},
        batch_size=50,
    )
    if runner.name == "spark":
        assert result.counters["batches"] >= 2
    else:
        assert result.components["$checkpointspout"].emitted >= 2
    got = {
        cid: (m.emitted, m.executed, m.acked, m.failed)
        for cid, m in result.components.items()
        if not cid.startswith("$")
    }
    assert got == {
        "lines": (LINES, 0, LINES, 0),
        "split": (words, LINES, LINES, 0),
        "count": (words, words, words, 0),
    }
