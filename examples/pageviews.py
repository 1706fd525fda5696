"""Page views per page per minute, by event time, exactly once into PostgreSQL.

    psql -h 127.0.0.1 -U postgres -d test -f examples/pageviews.sql
    python3 examples/pageviews.py clicks.jsonl 20000      # writes sample clicks
    CLICKS_URL=file://clicks.jsonl statestream run examples/pageviews.py --until-idle

Each click is a JSON object ``{"page": "/home", "ts": 1764374400000}`` (``ts``
in milliseconds since the epoch), one per line of a file or per entry of a
Redis stream. ``clicks`` reads them, ``parse`` makes ``(page, ts)`` tuples,
``minutes`` counts views per page in one-minute tumbling windows of event
time, aligned to the minute, with 5 s of lag for clicks that arrive out of
order (a click later than that goes to the ``late`` stream, which ``late``
logs), and ``views`` upserts ``(minute, page, views)`` into ``page_views``.
The window's tuples and the watermark are in the checkpoint and the sink
writes with it, so after any number of ``kill -9`` each minute's row holds
its exact count. At the end of a bounded input every open window fires.

* ``CLICKS_URL``: ``file://PATH`` (a file or folder of JSON lines) or
  ``redis://HOST:PORT/DB`` (default ``file://clicks.jsonl``)
* ``CLICKS_STREAM``: the Redis stream's name (default ``clicks``)
* ``POSTGRES_DSN``: the database holding ``page_views`` (default
  ``postgresql://postgres@127.0.0.1:5432/test``); ``PAGEVIEWS_TABLE`` another
  table of the same columns
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

from statestream import (
    BaseWindowedBolt,
    BasicBolt,
    BasicOutputCollector,
    Bolt,
    ConfigError,
    Duration,
    FileSpout,
    OutputFieldsDeclarer,
    Spout,
    Topology,
    TopologyBuilder,
    Tuple,
    TupleWindow,
    connectors,
)

DEFAULT_URL = "file://clicks.jsonl"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
log = logging.getLogger("pageviews")


class Parse(BasicBolt):
    """A click's JSON -> ``(page, ts)``; a line that is not a click is reported."""

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        click = json.loads(tuple["line"])
        collector.emit([str(click["page"]), int(click["ts"])])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["page", "ts"])


class ViewsPerMinute(BaseWindowedBolt):
    """Views of each page in each window: ``(minute, page, views)``."""

    def execute(self, window: TupleWindow) -> None:
        for page, n in sorted(Counter(t["page"] for t in window.get()).items()):
            self.collector.emit([window.start_timestamp, page, n])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["minute", "page", "views"])


class LogLate(Bolt):
    """Says which clicks came too late for their minute."""

    def execute(self, tuple: Tuple) -> None:
        log.warning("late click %s at %d: its minute was written", tuple[0], tuple[1])
        self.collector.ack(tuple)


def source(url: str) -> Spout:
    scheme = urlsplit(url).scheme
    if scheme == "file":
        return FileSpout(urlsplit(url).path or url[len("file://") :])
    if scheme in ("redis", "rediss", "unix"):
        stream = os.environ.get("CLICKS_STREAM", "clicks")
        return connectors.RedisStreamSpout(stream, fields=["line"], url=url)
    raise ConfigError(f"CLICKS_URL {url!r}: unknown scheme {scheme!r}; use file:// or redis://")


def topology() -> Topology:
    dsn = os.environ.get("POSTGRES_DSN", DEFAULT_DSN)
    table = os.environ.get("PAGEVIEWS_TABLE", "page_views")
    views = connectors.PostgresSink(
        table, ["minute", "page", "views"], dsn=dsn, mode="upsert", key=["minute", "page"]
    )
    return build(views)


def build(views: Bolt) -> Topology:
    """The pipeline into ``views`` (a test swaps in its own sink)."""
    b = TopologyBuilder("pageviews")
    b.set_spout("clicks", source(os.environ.get("CLICKS_URL", DEFAULT_URL)))
    b.set_bolt("parse", Parse(), 2).shuffle_grouping("clicks")
    minutes = (
        ViewsPerMinute()
        .with_tumbling_window(Duration.minutes(1))
        .with_timestamp_field("ts")
        .with_lag(Duration.seconds(5))
        .with_late_tuple_stream("late")
    )
    # Fields grouping on the page: each page's clicks reach one task, whose
    # windows count them all.
    b.set_bolt("minutes", minutes, 2).fields_grouping("parse", ["page"])
    b.set_bolt("views", views, 2).fields_grouping("minutes", ["page"])
    b.set_bolt("late", LogLate()).shuffle_grouping("minutes", "late")
    return b.build()


def sample_clicks(n: int, seed: int = 1, start_ms: int = 1_764_374_400_000) -> list[dict[str, Any]]:
    """``n`` clicks about 50 ms apart, each up to 4 s out of order (within the lag)."""
    rnd = random.Random(seed)
    pages = [f"/page/{i}" for i in range(20)]
    return [
        {"page": rnd.choice(pages), "ts": start_ms + i * 50 - rnd.randrange(4_000)}
        for i in range(n)
    ]


if __name__ == "__main__":
    path, count = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    with open(path, "w") as f:
        for click in sample_clicks(count):
            f.write(json.dumps(click) + "\n")
    print(f"{count} clicks written to {path}")
