"""The mesh of pipes between the workers: one per ordered pair, a frame per round."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import selectors
import time
from collections.abc import Mapping

log = logging.getLogger("statestream.workers")

# Pipe reads of 64 KiB: a 1 MiB read buffer costs an mmap, mremap and munmap per read.
_READ_SIZE = 1 << 16
_PIPE_SIZE = 1 << 20  # Linux's default /proc/sys/fs/pipe-max-size
#: Every mesh fd of the current generation (closed in each child but its own).
PIPES: list[int] = []


def pipe() -> tuple[int, int]:
    """A pipe for the mesh, its buffer raised to _PIPE_SIZE where the kernel allows:
    with the default 64 KiB a commit's frame (every ack a bolt held, 800 KB on
    the word count) crosses in a dozen write/read turns, each a wake-up of the
    peer, while both workers wait for it."""
    r, w = os.pipe()
    with contextlib.suppress(OSError, AttributeError):  # Linux only; capped by pipe-max-size
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    return r, w


class WorkerLost(Exception):
    """A peer's pipe closed: that worker died (the supervisor restarts the set)."""


class Mesh:
    """One pipe per ordered pair of workers; a round sends a frame to every peer and
    reads one from every peer, interleaving writes and reads so that two workers
    writing big frames to each other cannot block."""

    def __init__(self, index: int, writers: dict[int, int], readers: dict[int, int]) -> None:
        self.index = index
        self.writers = writers
        self.readers = readers
        for fd in (*writers.values(), *readers.values()):
            os.set_blocking(fd, False)
        self.sel = selectors.DefaultSelector()
        self.bytes_out = 0
        self.rbuf: dict[int, bytearray] = {p: bytearray() for p in readers}
        self.wbuf: dict[int, bytearray] = {p: bytearray() for p in writers}

    def exchange(self, frames: Mapping[int, bytes], need: bool) -> dict[int, bytes | bytearray]:
        """Queue ``frames`` (one per peer) and write what the pipes take; if
        ``need``, wait for the next frame of every peer (writing meanwhile, so
        that two workers never wait on each other's full pipes). Bytes a pipe
        does not take now go out during the next exchange, in order.

        Non-blocking reads and writes first, and ``select`` only when a peer's
        frame is not there yet: a round's exchange is a few system calls
        rather than a selector's registrations (Python code) each time.
        """
        for p, f in frames.items():
            buf = self.wbuf[p]
            buf += len(f).to_bytes(8, "little")
            buf += f
        done: dict[int, bytes | bytearray] = {}
        waiting: list[int] = []
        if need:
            for p in self.readers:
                frame = self._take(p)
                if frame is None:
                    waiting.append(p)
                else:
                    done[p] = frame
        while True:
            for p, buf in self.wbuf.items():
                if buf:
                    self._write(p, buf)
            for p in list(waiting):
                frame = self._read(p)
                if frame is not None:
                    done[p] = frame
                    waiting.remove(p)
            if not waiting:
                return done
            select.select(
                [self.readers[p] for p in waiting],
                [fd for p, fd in self.writers.items() if self.wbuf[p]],
                [],
            )

    def _write(self, p: int, buf: bytearray) -> None:
        try:
            n = os.write(self.writers[p], buf)
        except BlockingIOError:
            return
        except BrokenPipeError as exc:
            raise WorkerLost(f"worker {p} is gone") from exc
        self.bytes_out += n
        del buf[:n]

    def _read(self, p: int) -> bytes | bytearray | None:
        """Peer ``p``'s next frame if it is all there (reading what the pipe holds)."""
        while True:
            try:
                chunk = os.read(self.readers[p], _READ_SIZE)
            except BlockingIOError:
                return None
            if not chunk:
                raise WorkerLost(f"worker {p} is gone")
            self.rbuf[p] += chunk
            frame = self._take(p)
            if frame is not None:
                return frame

    def close(self, timeout: float = 10.0) -> None:
        """Leave the mesh in step with the peers: a peer may be a round behind and
        still writing its last frame, or reading one of ours. Write out what is
        buffered (reading and dropping what comes), close the write ends, then
        read until every peer has closed its own."""
        end = time.monotonic() + timeout
        sel = self.sel
        open_readers = dict(self.readers)
        for p, fd in self.writers.items():
            if self.wbuf[p]:
                sel.register(fd, selectors.EVENT_WRITE, ("w", p))
        for p, fd in open_readers.items():
            sel.register(fd, selectors.EVENT_READ, ("r", p))
        closed_writers = False
        try:
            while open_readers and time.monotonic() < end:
                if not closed_writers and not any(self.wbuf.values()):
                    for fd in self.writers.values():
                        os.close(fd)
                    closed_writers = True
                for key, _ in sel.select(max(0.0, end - time.monotonic())):
                    kind, p = key.data
                    try:
                        if kind == "w":
                            n = os.write(key.fd, self.wbuf[p])
                            del self.wbuf[p][:n]
                            if not self.wbuf[p]:
                                sel.unregister(key.fd)
                        elif not os.read(key.fd, _READ_SIZE):
                            sel.unregister(key.fd)
                            del open_readers[p]
                    except BlockingIOError:
                        continue
                    except OSError:  # a peer died meanwhile: nothing more to say to it
                        sel.unregister(key.fd)
                        self.wbuf[p].clear()
                        if kind == "r":
                            del open_readers[p]
        finally:
            for key in list(sel.get_map().values()):
                sel.unregister(key.fd)

    def _take(self, p: int) -> bytes | bytearray | None:
        """The next whole frame from peer ``p``, if it is all buffered."""
        buf = self.rbuf[p]
        if len(buf) < 8:
            return None
        n = int.from_bytes(buf[:8], "little")
        if len(buf) < 8 + n:
            return None
        if len(buf) == 8 + n:  # the usual case: the buffer is the frame, uncopied
            self.rbuf[p] = bytearray()
            del buf[:8]  # O(1): a bytearray's start moves
            return buf
        with memoryview(buf) as view:
            frame = bytes(view[8 : 8 + n])
        del buf[: 8 + n]
        return frame
