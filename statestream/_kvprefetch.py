"""Reading a stateful task's keys ahead of a drain: which key a tuple will read, and
whether the guess pays.

A bolt task's runtime hands it its whole inbox at once; before it executes
them, the keys those tuples will read are fetched from the store in one call
(:meth:`~statestream._kvstate.StoredKeyValueState.prefetch`, the backend's
``get_many``: a Redis ``HMGET``, one sqlite ``SELECT ... IN``) instead of one
round trip a miss, as Flink 2.0's disaggregated state batches its reads.
Which key a tuple will read is a guess:

* the bolt says it (:attr:`statestream.StatefulBolt.state_key`): the name of a
  field, or a function of the tuple, or ``False`` for no read-ahead;
* else, when every data input of the bolt is fields-grouped on one field, the
  value of that field (a word count's word: the key the grouping routed by);
* else no read-ahead.

A wrong guess reads keys nobody reads (and the tuples then miss as before).
:class:`ReadAheadJudge` watches the reads a drain still made one key at a time
after its read-ahead, and turns read-ahead off for the task when they show the
guess is mostly wrong, so a wrong guess costs a few batched reads and then
nothing. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from ._tuple import Tuple

#: Keys read ahead or missed before the judge decides, and at each later look.
JUDGE_WINDOW: Final = 2048
#: A window whose drains still missed more than this share of the keys read ahead
#: means the guess is wrong: read-ahead stops for the task.
WRONG_SHARE: Final = 0.5
#: A drain that read nothing ahead and missed nothing (every key cached, or new:
#: the state's filter answers a first sight) skips read-ahead for the next drain,
#: then twice as many after each such drain again, up to this many; a skipped
#: drain that misses this many keys or more takes it up again at once.
MOST_QUIET: Final = 64
WAKE_MISSES: Final = 8


class ReadAheadJudge:
    """Whether a task's drains read ahead, from what they read.

    :meth:`wants` before a drain: whether it reads ahead. :meth:`drained`
    after it: ``ahead``, whether it did; ``fetched``, the keys it read ahead;
    ``missed``, the keys the drain then read one at a time.

    * A wrong guess: a right one leaves ``missed`` near 0 (the tuples' reads
      hit the cache), a wrong one near the tuples' own misses. Over windows of
      :data:`JUDGE_WINDOW` keys read ahead or missed, more misses than
      :data:`WRONG_SHARE` of the keys read ahead turn read-ahead off for good
      (:attr:`on`).
    * A drain with nothing to read (``fetched`` and ``missed`` 0) costs the
      guess of every tuple's key for nothing: the next drains skip
      read-ahead, 1, 2, 4 ... up to :data:`MOST_QUIET` of them, until a
      skipped drain misses :data:`WAKE_MISSES` keys or more.
    """

    __slots__ = ("fetched", "missed", "on", "quiet", "skip")

    def __init__(self) -> None:
        self.on = True
        self.fetched = 0
        self.missed = 0
        self.quiet = 0  # drains skipped after the last quiet drain
        self.skip = 0  # drains still to skip

    def wants(self) -> bool:
        """Whether the next drain reads ahead (False while read-ahead is off, or
        while drains are skipped after a quiet one)."""
        if not self.on:
            return False
        if self.skip:
            self.skip -= 1
            return False
        return True

    def drained(self, ahead: bool, fetched: int, missed: int) -> None:
        if not ahead:
            if missed >= WAKE_MISSES:
                self.skip = self.quiet = 0  # reads again: read ahead again at once
            return
        if fetched == 0 and missed == 0:
            self.skip = self.quiet = min(MOST_QUIET, 2 * self.quiet or 1)
            return
        self.quiet = 0
        self.fetched += fetched
        self.missed += missed
        # Misses count too: a guess whose keys the filter answers (new keys, never
        # read) fetches nothing while the tuples' real keys miss.
        if self.fetched + self.missed >= JUDGE_WINDOW:
            if self.missed > WRONG_SHARE * self.fetched:
                self.on = False
            self.fetched = self.missed = 0


def _by_field(name: str) -> Callable[[Tuple], Any]:
    def key(tup: Tuple) -> Any:
        return tup.values[tup.origin.fields.index_of(name)]

    return key


def _by_input(names: dict[tuple[str, str], str]) -> Callable[[Tuple], Any]:
    def key(tup: Tuple) -> Any:
        origin = tup.origin
        name = names[origin.component, origin.stream]
        return tup.values[origin.fields.index_of(name)]

    return key


def key_guess(
    state_key: Any, inputs: Iterable[tuple[str, str, str, Sequence[str]]]
) -> Callable[[Tuple], Any] | None:
    """The function that guesses the key a tuple will read, or None for no read-ahead.

    ``state_key``: the bolt's :attr:`~statestream.StatefulBolt.state_key`
    (None: guess from the groupings; ``False``: none; a field name; a
    function of the tuple). ``inputs``: the bolt's data inputs as
    ``(source, stream, grouping kind, grouped fields)``.
    """
    if state_key is False:
        return None
    if isinstance(state_key, str):
        return _by_field(state_key)
    if callable(state_key):
        return state_key  # type: ignore[no-any-return]
    names: dict[tuple[str, str], str] = {}
    for source, stream, kind, fields in inputs:
        if kind != "fields" or len(fields) != 1:
            return None  # a tuple of this input may read any key
        names[source, stream] = fields[0]
    if not names:
        return None
    distinct = set(names.values())
    if len(distinct) == 1:
        return _by_field(distinct.pop())
    return _by_input(names)
