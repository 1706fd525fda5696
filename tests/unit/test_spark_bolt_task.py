"""A Spark bolt task run in this process (no Spark: Spark's last try of the task):
what its acknowledgement tells the driver of a tuple it gave up on."""

from __future__ import annotations

from typing import Any

import cloudpickle
import pytest

from statestream import BasicBolt, Bolt, Config, FailedException, TopologyBuilder
from statestream.runtime.plan import RuntimePlan
from statestream.runtime.spark.executor import Shipped, run_bolt
from statestream.runtime.spark.shared import ACK, SEQ_BITS
from statestream.testing import ListSpout


class Broadcast:
    """What a Spark broadcast offers the executor: ``value``."""

    def __init__(self, value: Any) -> None:
        self.value = value


class BasicPicky(BasicBolt):
    def execute(self, tuple: Any, collector: Any) -> None:
        if tuple[0] == "poison":
            raise FailedException("refused on purpose")
        collector.emit([tuple[0].upper()])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(["word"])


class RichPicky(Bolt):
    def execute(self, tuple: Any) -> None:
        if tuple[0] == "poison":
            self.collector.fail(tuple)
            return
        self.collector.emit([tuple[0].upper()], anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(["word"])


def _run(bolt: Any, words: list[str], exactly_once: bool = True) -> tuple[Any, list[Any]]:
    b = TopologyBuilder("task")
    b.set_spout("src", ListSpout(words, fields=["word"]))
    b.set_bolt("picky", bolt).shuffle_grouping("src")
    plan = RuntimePlan(b.build(), Config({}))
    payload = Broadcast(({}, cloudpickle.dumps(Shipped(plan, exactly_once=exactly_once))))
    src = plan.component_tasks["src"][0]
    items = [
        (0, ((src << SEQ_BITS) | i, "default", (word,), (((src << SEQ_BITS) | i) + 1,)))
        for i, word in enumerate(words)
    ]
    out = list(run_bolt(f"test-{id(bolt)}-{exactly_once}", payload, "picky", 0, {}, 0, items))
    (ack,) = [rec for target, _, rec in out if target == ACK]
    return ack, [rec for target, _, rec in out if target != ACK]


# The two ways a bolt fails a tuple: a BasicBolt raising FailedException, a rich
# bolt calling collector.fail().
PICKY = pytest.mark.parametrize(
    ("bolt", "error_type", "error"),
    [
        (BasicPicky(), "FailedException", "refused on purpose"),
        (RichPicky(), "Failed", "failed by collector.fail()"),
    ],
    ids=["basic-bolt-raises", "rich-bolt-fails"],
)


@PICKY
def test_a_tuple_given_up_on_names_its_message_and_why(
    bolt: Any, error_type: str, error: str
) -> None:
    # At-least-once: the driver retries the message (exactly-once: below).
    ack, emitted = _run(bolt, ["a", "poison", "b"], exactly_once=False)
    cid, index, executed, n_emitted, failed, prepared, errors, lost, timing, keys, dead = ack
    assert dead == []
    assert (cid, index, prepared, errors, keys) == ("picky", 0, None, [], None)
    # Sampled as the local tasks sample (rate 0.05): the first execution, then 1 in 20.
    assert (timing.component, timing.task_index, timing.samples) == ("picky", 0, 1)
    # The poison tuple is executed 3 times (MAX_TUPLE_FAILURES), then given up on.
    assert (executed, failed, n_emitted) == (5, 3, 2)
    src_root = lost[0][0]
    assert lost == [(src_root, "picky", error_type, error)]
    assert src_root & ((1 << SEQ_BITS) - 1) == 2  # the record at index 1 (root = key + 1)
    assert emitted == []  # a last bolt sends acknowledgements only (no subscriber)


@PICKY
def test_exactly_once_dead_letters_the_tuple_itself_after_max_attempts(
    bolt: Any, error_type: str, error: str
) -> None:
    # As on the local runtime: statestream.retry.max.attempts (5) executions of
    # the tuple in its task, then the tuple alone is dead-lettered (the driver
    # writes it) and nothing of its message is lost: the batch commits.
    ack, _ = _run(bolt, ["a", "poison", "b"])
    _, _, executed, n_emitted, failed, _, errors, lost, _, _, dead = ack
    assert (executed, failed, n_emitted, errors, lost) == (7, 5, 2, [], [])
    src = dead[0][0].split(":")[0]
    assert dead == [(dead[0][0], "src", "default", ["poison"], error_type, error, 5)]
    assert src == "picky-0"
