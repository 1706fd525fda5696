"""slow_words with long component ids and class names, for the live view's labels:
each is longer than a node's box can hold at its widest, so the page must cut it
(and say it whole in the node's tooltip). Same input and bolts as slow_words."""

from __future__ import annotations

from pathlib import Path

from slow_words import SlowLines
from word_bolts import Count, Split

from statestream import Topology, TopologyBuilder

SPOUT = "sentences_read_slowly_from_the_corpus_file_in_the_working_directory"
SPLIT = "split_every_sentence"
COUNT = "count_every_word_in_checkpointed_state"


class SlowLinesFromTheCorpusFileInTheWorkingDirectory(SlowLines):
    pass


class SplitEverySentenceIntoItsWordsOnWhitespace(Split):
    pass


class CountEveryWordInTheKeyValueStateOfTheTask(Count):
    pass


def topology() -> Topology:
    b = TopologyBuilder("long_names")
    b.set_spout(SPOUT, SlowLinesFromTheCorpusFileInTheWorkingDirectory(Path("corpus.txt")))
    b.set_bolt(SPLIT, SplitEverySentenceIntoItsWordsOnWhitespace(), 2).shuffle_grouping(SPOUT)
    b.set_bolt(COUNT, CountEveryWordInTheKeyValueStateOfTheTask(), 2).fields_grouping(
        SPLIT, ["word"]
    )
    return b.build()
