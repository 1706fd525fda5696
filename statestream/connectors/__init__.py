"""Sources and sinks for real systems, one module per system (DESIGN.md section 8).

Each connector's client library is an optional dependency behind an extra
(``pip install 'statestream[redis]'``, ``[nats]``, ``[rabbitmq]``,
``[postgres]``, ``[kafka]``). Importing this package imports none of them: a name is
loaded from its module on first use (the module ``__getattr__`` below), and a
missing library is one error naming the extra to install.

==================  ============================  ==========================================
connector           guarantee                     position (in the checkpoint record)
==================  ============================  ==========================================
RedisStreamSpout    exactly-once                  last entry id read, per stream
JetStreamSpout      exactly-once                  last stream sequence read
KafkaSpout          exactly-once                  next offset, per partition (assign, no group)
RabbitMQSpout       stream queue: exactly-once;   stream queue: next offset; classic queue:
                    classic queue: at-least-once  none (acked after the checkpoint commits)
PostgresSink        exactly-once (two-phase)      guard row (topology, sink@lineage, task) -> txid
RedisSink           exactly-once (two-phase)      guard hash field, checked under WATCH
FileSink            exactly-once (two-phase)      guard file: txid and the committed length
KafkaSink           exactly-once (two-phase) for  guard group (topology, sink@lineage, task):
                    read_committed consumers      offset txid + 1, in the records' transaction
TwoPhaseSink        the base of the sinks above   stage at PREPARE, write at COMMIT with the guard
BrokerSpout         the base of the three spouts  the subclass's (its position/seek)
==================  ============================  ==========================================

The sinks are exactly-once with exactly-once state (the default); under
at-least-once a replayed tuple is written again. A guard names the lineage
of the state it belongs to, so exactly-once holds across ``statestream state
clear`` and a new store: nothing is taken as written that this state did not write.

A third party's source for a broker's log subclasses :class:`BrokerSpout`
(its docstring says what a subclass supplies); a third party's sink,
:class:`TwoPhaseSink`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers only: at run time __getattr__ loads them
    from ._source import BrokerSpout, Lost
    from .files import FileSink
    from .jetstream import JetStreamSpout
    from .kafka import KafkaSpout
    from .kafka_sink import KafkaSink
    from .postgres import PostgresSink
    from .rabbitmq import RabbitMQSpout
    from .redis_sink import RedisSink
    from .redis_streams import RedisStreamSpout
    from .sink import TwoPhaseSink

__all__ = [
    "BrokerSpout",
    "FileSink",
    "JetStreamSpout",
    "KafkaSink",
    "KafkaSpout",
    "Lost",
    "PostgresSink",
    "RabbitMQSpout",
    "RedisSink",
    "RedisStreamSpout",
    "TwoPhaseSink",
]

# public name -> the module of this package that defines it.
_LAZY: dict[str, str] = {
    "BrokerSpout": "_source",
    "Lost": "_source",
    "JetStreamSpout": "jetstream",
    "KafkaSpout": "kafka",
    "RabbitMQSpout": "rabbitmq",
    "RedisStreamSpout": "redis_streams",
    "TwoPhaseSink": "sink",
    "PostgresSink": "postgres",
    "RedisSink": "redis_sink",
    "FileSink": "files",
    "KafkaSink": "kafka_sink",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
