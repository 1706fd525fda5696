"""Time as an input: the runtime reads a clock it is given, so tests can fake it."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "FakeClock", "SystemClock"]


class Clock(Protocol):
    """A monotonic clock in seconds, and a way to wait on it."""

    def monotonic(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        """Seconds since the epoch (processing-time windows are aligned to it)."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that moves only when told to: ``advance`` or ``sleep`` (which returns at once).

    With a fake clock, a runtime that waits for a timeout does not wait in
    real time: every idle sleep jumps the clock forward.
    """

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        """The same reading, as seconds since the epoch (a fake epoch: ``start``)."""
        return self.now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock cannot go back ({seconds} s)")
        self.now += seconds


class StepClock(FakeClock):
    """A fake clock that moves ``step`` seconds at every reading.

    A run on it takes its checkpoints at the same points every time, however
    fast the machine or the core is (the system clock places them, and so
    what a crash at a given tuple finds committed, by load and speed).
    """

    def __init__(self, step: float, start: float = 0.0) -> None:
        super().__init__(start)
        self.step = step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now
