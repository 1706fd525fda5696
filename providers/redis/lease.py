"""The redis provider's claims: a lease key its holder renews (see the package doc)."""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from typing import TYPE_CHECKING, Final

import orjson

from statestream.provider import (
    ProcessClaims,
    StateLockedError,
)

if TYPE_CHECKING:
    import redis as redis_module

log = logging.getLogger("statestream.redis")


_CLAIM_POLL_S: Final = 0.05
_RENEW_JOIN_S: Final = 1.0  # how long release waits for a renewal under way

# KEYS[1]: a claim key. ARGV: the value a claimer found (a dead holder's), its
# own, the ttl in ms. Takes the key over only if it still holds the dead
# holder (or nothing), so that of two claimers taking it over one wins.
_TAKE_OVER_LUA: Final = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""
# ARGV: our value, the ttl in ms. 1: renewed; else what the key holds now (nil: gone).
_RENEW_LUA: Final = """
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return held
"""
# ARGV: our value. Deletes the key only if it is still ours.
_RELEASE_LUA: Final = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

_Ident = tuple[str, str]  # (store, claim key): which lease a claim of this process joins


def _process_stat(pid: int) -> tuple[bytes, int] | None:
    """The state letter and the start time (field 22, clock ticks since boot) of process
    ``pid``, from /proc/<pid>/stat; None if that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        # The command name (field 2) may hold spaces and parentheses: split after its last ")".
        fields = stat[stat.rindex(b")") + 2 :].split()
        return fields[0], int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _read(path: str, link: bool = False) -> str | None:
    try:
        if link:
            return os.readlink(path)
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


@functools.cache
def _this_process(pid: int) -> tuple[str, int | None, str | None, str | None]:
    """Host name, start time, boot id and pid namespace of this process (cached per pid:
    a forked child asks again)."""
    stat = _process_stat(pid)
    return (
        socket.gethostname(),
        None if stat is None else stat[1],
        _read("/proc/sys/kernel/random/boot_id"),
        _read("/proc/self/ns/pid", link=True),
    )


class _Holder:
    """Who holds a claim key: what its value says, as JSON."""

    __slots__ = ("boot", "host", "pid", "pidns", "start", "token")

    def __init__(
        self,
        token: str,
        host: str,
        pid: int,
        start: int | None,
        boot: str | None,
        pidns: str | None,
    ) -> None:
        self.token = token
        self.host = host
        self.pid = pid
        self.start = start  # the process's start time: a reused pid is another process
        self.boot = boot  # start times and pids are of one boot of one machine ...
        self.pidns = pidns  # ... and pids of one pid namespace (containers share a host name)

    @classmethod
    def of_this_process(cls, token: str) -> _Holder:
        pid = os.getpid()
        host, start, boot, pidns = _this_process(pid)
        return cls(token, host, pid, start, boot, pidns)

    def encode(self) -> bytes:
        return orjson.dumps({name: getattr(self, name) for name in self.__slots__})

    @classmethod
    def decode(cls, value: bytes) -> _Holder | None:
        """The holder ``value`` names, or None if it is not a claim's value."""
        try:
            fields = orjson.loads(value)
            holder = cls(**{name: fields[name] for name in cls.__slots__})
        except (orjson.JSONDecodeError, TypeError, KeyError):
            return None
        if not isinstance(holder.pid, int) or not isinstance(holder.host, str):
            return None
        return holder

    def on_this_machine(self) -> bool:
        """Whether the holder's pid can be looked at here: same host name, boot and pid
        namespace (containers may share a host name), and a /proc to look in."""
        me = _Holder.of_this_process("")
        return (
            me.boot is not None
            and me.pidns is not None
            and (self.host, self.boot, self.pidns) == (me.host, me.boot, me.pidns)
        )

    def is_gone(self, value: bytes) -> bool:
        """Whether the holding process is certainly dead, so that its lease (``value``)
        may be taken over now.

        Only a process of this machine (this boot, this pid namespace) can be
        looked at; anything that cannot be told counts as alive. A lease of
        this very process that none of its claims holds is a leftover too (a
        release that could not reach the server).
        """
        if not self.on_this_machine():
            return False
        me = _Holder.of_this_process("")
        if self.pid == me.pid:
            # _TAKING first: a value leaves it only once it is in _CLAIMS.
            ours = value in _TAKING or any(lease.value == value for lease in _CLAIMS.holds())
            return self.start != me.start or not ours
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # alive, another user's
        stat = _process_stat(self.pid)
        if stat is None:
            return False  # hidden from us (hidepid): alive as far as we can tell
        state, start = stat
        # A zombie holds nothing any more; another start time is another process.
        return state in (b"Z", b"X") or (self.start is not None and start != self.start)

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


def _locked(
    scope: str, key: str, where: str, wait: float, holder: _Holder | None, held: bytes, pttl: int
) -> StateLockedError:
    """The StateLockedError of a claim another process holds past the wait."""
    if pttl < 0:
        hint = (
            f"the key has no expiry, so no statestream claim set it: if no run of the "
            f"topology is running, delete it (redis-cli DEL {key!r})"
        )
    elif holder is None:
        hint = (
            f"the key holds {held[:80]!r}, not a statestream claim; "
            f"it expires within {pttl / 1000:.1f} s"
        )
    elif holder.on_this_machine():
        hint = None  # alive: a dead holder of this machine would have been taken over
    else:
        hint = f"if that process is gone, its lease expires within {pttl / 1000:.1f} s"
    return StateLockedError.for_scope(
        scope,
        where,
        pid=None if holder is None else holder.pid,
        host=None if holder is None else holder.host,
        wait=wait,
        hint=hint,
    )


class _Lease:
    """This process's lease of one claim key (a :class:`~statestream.provider.Hold`),
    shared by every claim of its scope here, and the daemon thread that renews it."""

    def __init__(
        self,
        client: redis_module.Redis,
        scope: str,
        key: str,
        where: str,
        value: bytes,
        ttl_ms: int,
    ) -> None:
        self.client = client
        self.scope = scope
        self.key = key
        self.where = where
        self.value = value
        self.ttl_ms = ttl_ms
        self.lost: str | None = None  # why, once the lease is no longer ours
        self._renew = client.register_script(_RENEW_LUA)
        self._delete = client.register_script(_RELEASE_LUA)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, taken: float) -> None:
        """Start renewing; ``taken`` is when the command that took the lease was sent."""
        self._thread = threading.Thread(
            target=self._keep, args=(taken,), name=f"statestream-claim-{self.scope}", daemon=True
        )
        self._thread.start()

    def _keep(self, renewed: float) -> None:
        """Renew every third of the ttl until released or lost; never raises.

        ``renewed`` is when the last renewal that succeeded was sent: the
        server extended the lease at that moment or later, so it holds at
        least until ``renewed + ttl``, and a renewal that fails is retried
        until then.
        """
        ttl = self.ttl_ms / 1000
        delay = ttl / 3
        failing = False
        lapsed = False  # the server was away past the ttl: the key may have expired
        while not self._stop.wait(delay):
            sent = time.monotonic()
            try:
                held = self._renew(keys=[self.key], args=[self.value, self.ttl_ms])
            except Exception as exc:  # the lease outlives any error but its expiry
                if self._stop.is_set():
                    return
                left = renewed + ttl - time.monotonic()
                if left <= 0:
                    # Not lost yet: a server that cannot be reached is no other
                    # run's either. The run rides the outage out (its store
                    # operations wait, statestream._outage) and the lease is
                    # taken again when the server answers, unless another run
                    # took it meanwhile.
                    if not lapsed:
                        log.warning(
                            "the claim of topology %r (%s) could not be renewed for %g s "
                            "(%s: %s): it is taken again when the server answers, unless "
                            "another run holds it by then",
                            self.scope,
                            self.where,
                            ttl,
                            type(exc).__name__,
                            exc,
                        )
                    lapsed = failing = True
                    delay = min(ttl / 3, max(ttl / 20, _CLAIM_POLL_S))
                    continue
                if not failing:
                    log.warning(
                        "cannot renew the claim of topology %r (%s): %s: %s; retrying for "
                        "%.1f s more, until the lease would expire",
                        self.scope,
                        self.where,
                        type(exc).__name__,
                        exc,
                        left,
                    )
                failing = True
                delay = min(ttl / 3, max(ttl / 20, _CLAIM_POLL_S))
                continue
            if held == 1:
                renewed, delay, failing, lapsed = sent, ttl / 3, False, False
                continue
            if self._stop.is_set():
                return  # released meanwhile: the key went with it
            # A renewal answered past the lease's end (a stalled server holds the
            # command, then runs it) finds the key expired, as one that failed.
            lapsed = lapsed or time.monotonic() > renewed + ttl
            if held is None and lapsed and self._take_again():
                log.warning(
                    "took the claim of topology %r (%s) again: the server is back",
                    self.scope,
                    self.where,
                )
                renewed, delay, failing, lapsed = sent, ttl / 3, False, False
                continue
            if held is None:
                self._lose("its key is gone (deleted, or expired unrenewed)")
            else:
                holder = _Holder.decode(held)
                who = f"{held[:80]!r}" if holder is None else holder.describe()
                self._lose(f"another process holds it now ({who})")
            return

    def _take_again(self) -> bool:
        """Take the expired lease again, if no other run took it (SET NX); never raises."""
        try:
            return bool(self.client.set(self.key, self.value, nx=True, px=self.ttl_ms))
        except Exception:
            return False

    def _lose(self, why: str) -> None:
        lost = f"the claim of topology {self.scope!r} ({self.where}) was lost: {why}"
        _CLAIMS.forget(self)  # new claims here decide afresh
        log.error(
            "%s. Another run of the topology may write its state now, and this run would "
            "undo its checkpoints: it stops (the runtimes look every second)",
            lost,
        )
        self.lost = lost  # last: whoever sees it finds the error logged

    def end(self) -> None:
        """Stop renewing and delete the key if it is still ours; never raises, since
        runs let go of their claim on the way out of a failure."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(_RENEW_JOIN_S)
        try:
            self._delete(keys=[self.key], args=[self.value])
        except Exception as exc:  # the lease expires by itself; a release must not fail a run
            log.warning(
                "could not delete the claim of topology %r (%s): %s: %s; it expires within %g s",
                self.scope,
                self.where,
                type(exc).__name__,
                exc,
                self.ttl_ms / 1000,
            )
        finally:
            self.client.close()

    def __repr__(self) -> str:
        return f"redis lease {self.where}"


def _has_value(value: bytes, lease: _Lease) -> bool:
    return lease.value == value


# The leases this process holds, by (store, claim key); and the values it is
# taking right now, which a claim of another of its threads must not take
# for leftovers (set operations are atomic: no lock).
_CLAIMS: ProcessClaims[_Lease] = ProcessClaims()
_TAKING: set[bytes] = set()
