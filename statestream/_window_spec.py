"""A window's shape: its length and slide (:class:`Count` or :class:`Duration`,
as Storm's) and whether it runs on event time, checked when declared.

Apart from :mod:`statestream._windowing`'s model, which imports it: the
shape is what a bolt declares and the config reference names, the model only
what it is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._errors import ConfigError

__all__ = ["Count", "Duration", "WindowSpec", "in_memory_refusal"]


class Duration:
    """A length of time, in whole milliseconds (Storm's ``BaseWindowedBolt.Duration``)."""

    __slots__ = ("ms",)

    def __init__(self, ms: int) -> None:
        if isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
            raise ConfigError(f"a window Duration is a positive number of milliseconds, not {ms!r}")
        self.ms = ms

    @classmethod
    def milliseconds(cls, n: int) -> Duration:
        return cls(n)

    @classmethod
    def seconds(cls, n: float) -> Duration:
        return cls(_whole_ms(n * 1000, "seconds", n))

    @classmethod
    def minutes(cls, n: float) -> Duration:
        return cls(_whole_ms(n * 60_000, "minutes", n))

    @classmethod
    def hours(cls, n: float) -> Duration:
        return cls(_whole_ms(n * 3_600_000, "hours", n))

    @classmethod
    def days(cls, n: float) -> Duration:
        return cls(_whole_ms(n * 86_400_000, "days", n))

    def __eq__(self, other: object) -> bool:
        return type(other) is Duration and other.ms == self.ms

    def __hash__(self) -> int:
        return hash(("Duration", self.ms))

    def __repr__(self) -> str:
        return f"Duration.milliseconds({self.ms})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Compiled (mypyc), the class pickles only by what this says.
        return (Duration, (self.ms,))


def _whole_ms(ms: float, unit: str, n: float) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, float)) or ms != int(ms):
        raise ConfigError(f"Duration.{unit}({n!r}) is not a whole number of milliseconds")
    return int(ms)


class Count:
    """A number of tuples (Storm's ``BaseWindowedBolt.Count``)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ConfigError(f"a window Count is a positive number of tuples, not {n!r}")
        self.n = n

    @classmethod
    def of(cls, n: int) -> Count:
        return cls(n)

    def __eq__(self, other: object) -> bool:
        return type(other) is Count and other.n == self.n

    def __hash__(self) -> int:
        return hash(("Count", self.n))

    def __repr__(self) -> str:
        return f"Count({self.n})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Count, (self.n,))


@dataclass(frozen=True)
class WindowSpec:
    """A window's shape: its length and slide, and whether it runs on event time."""

    # Count | Duration, checked by __post_init__: typed Any so that any other value
    # gets its ConfigError there, not a TypeError from the compiled constructor.
    length: Any
    sliding: Any
    event_time: bool = False

    def __post_init__(self) -> None:
        for name, v in (("length", self.length), ("sliding", self.sliding)):
            if not isinstance(v, (Count, Duration)):
                raise ConfigError(f"a window's {name} is a Count or a Duration, not {v!r}")
        same_kind = type(self.length) is type(self.sliding)
        if same_kind and _size(self.sliding) > _size(self.length):
            raise ConfigError(
                f"a window slides by at most its length: sliding {self.sliding!r} is "
                f"longer than length {self.length!r}"
            )


def in_memory_refusal(
    spec: WindowSpec, lag_ms: int, timeout_ms: int | None, max_pending: int | None
) -> str | None:
    """Why windows kept in memory, their tuples acked only when no window holds
    them (Storm's at-least-once windows), cannot run as configured, or None.

    As Storm's WindowedBoltExecutor checks: a tuple waits up to the window's
    length, its slide and the lag for its ack, so that must be within the
    message timeout (``timeout_ms``, None if tuples do not time out), or every
    tuple would be failed and replayed; and a count window needs its tuples all
    pending at once, so its length must be within ``topology.max.spout.pending``
    (``max_pending``), or the spout stops before the first window fills."""
    if timeout_ms is not None:
        wait = lag_ms if spec.event_time else 0
        wait += sum(v.ms for v in (spec.length, spec.sliding) if isinstance(v, Duration))
        if wait >= timeout_ms:
            return (
                f"its tuples wait up to {wait} ms (window length, slide and lag) for their "
                f"acks, not less than topology.message.timeout.secs ({timeout_ms // 1000} s): "
                "raise the timeout above it, or use exactly-once state "
                "(statestream.state.exactly.once: true), which acks them at the checkpoint"
            )
    if isinstance(spec.length, Count) and max_pending is not None and spec.length.n > max_pending:
        return (
            f"its count window of {spec.length.n} tuples is longer than "
            f"topology.max.spout.pending ({max_pending}): the spout would stop before it "
            "fills; raise topology.max.spout.pending above the window's length"
        )
    return None


def _size(v: Count | Duration) -> int:
    return v.n if isinstance(v, Count) else v.ms
