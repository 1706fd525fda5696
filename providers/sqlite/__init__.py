"""The ``sqlite`` state provider: embedded, durable, one file.

Config (``topology.state.provider.config``)::

    path:          "./statestream-data/state.db"  # parent directories are created
    serializer:    "json"                         # or "pickle" (see statestream.provider)
    synchronous:   "full"                         # sqlite's PRAGMA synchronous: full|normal|off
    timeout:       5000                           # ms to wait for another writer's lock
    cache_mb:      8                              # page cache of each connection, MiB (>= 1)
    checkpoint_mb: 16                             # WAL size that starts a checkpoint, MiB (>= 1)
    page_size:     2048                           # bytes, 512..65536, a power of two;
                                                  # only a new file takes it

Schema (``PRAGMA application_id`` = 0x53537374, ``user_version`` = 3)::

    statestream_entries  (namespace TEXT, key BLOB, value BLOB NOT NULL)     folded committed entries
    statestream_log      (seq INTEGER, namespace TEXT, txid INTEGER, delta BLOB)  deltas, in order
    statestream_txids    (namespace TEXT, committed INTEGER, prepared INTEGER)
    statestream_runs     (namespace TEXT, run INTEGER, key BLOB, value BLOB)  sorted runs (runs.py)
    statestream_run_list (namespace TEXT, run INTEGER, level, rows, deletes)

A prepare writes its whole delta as one record of the log (the encoded
keys and values back to back, :func:`encode_delta`), and a commit only
moves the namespace's committed txid: a record is committed once its txid
is at most that, and the committed state is the entries with the committed
records applied over them in ``seq`` order. A rollback deletes the records
above the committed txid. So a checkpoint writes a few pages of one record
rather than a row per key in two B-trees (schema 1 did that: a row per key
into a table of prepared rows, then a copy of each into the entries), and
costs about the same whatever the delta's keys are. Once
``_FOLD_RECORDS`` committed records (or ``_FOLD_BYTES``) have gathered, the
commit that reached the count also folds them into the entries, in the
same transaction: a key changed at every checkpoint is written to the
B-tree once per fold instead of twice per checkpoint. Reads merge the two:
a scan reads the committed records first; a point read keeps their merge
while the committed txid and the records are the same (the backend that
committed them keeps it current itself and asks the store nothing more
than the point read: see ``backend._SQLiteBackend``). ``compact()`` folds
now, for tools that read ``statestream_entries`` directly.

A file of schema 1 is upgraded in place when it is first opened (its
prepared rows become one record per namespace), in one transaction, and a
file of schema 2 gains the two (empty) tables of runs. A statestream older
than the runs refuses a file of schema 3, naming the version.

A large namespace folds differently: once its entries hold at least 8 times
a fold's keys, the fold writes its keys as a sorted run rather than into the
entries, and the runs are merged in sorted passes (``runs.py`` says how and
why). What follows is the cost of a fold into the entries, which a small
state keeps paying, and which a run avoids.

What a fold costs. A fold rewrites each B-tree page that holds a
changed key, once in the WAL and once more when a checkpoint copies the WAL
back into the database file. In a small state a few pages hold every key;
in a large one scattered keys each sit on a page of their own: committing
1,000 random keys writes ~40 pages in a state of 1,000 keys and ~1,000 in a
state of 1,000,000 (2 KiB pages). That count is the B-tree's (the log
records in between cost only their own bytes); the settings
keep the cost of each page down (bench/bench_state.py measures them):

* ``page_size`` 2048 rather than sqlite's 4096 halves the bytes each page
  costs to write and fsync. A record (key and value encoded) of up to ~480
  bytes stays within its page, longer ones spill into overflow pages: for
  states of large values choose 4096 (~1,000 bytes) or more. A file keeps
  the page size it was created with, whatever the config says; to change
  it, stop the topology and run ``PRAGMA journal_mode=DELETE; PRAGMA
  page_size=N; VACUUM; PRAGMA journal_mode=WAL`` on it with ``sqlite3``.
* ``cache_mb`` must hold the pages one fold changes, or sqlite writes
  them to the WAL before the commit and reads them back. sqlite's default,
  2 MiB, holds fewer than a fold of 1,000 scattered keys changes in 4 KiB
  pages. The cache grows only as pages are read.
* ``checkpoint_mb``: the commit that grows the WAL past this size also
  checkpoints it (two fsyncs and a write of every page in it), and a page
  that several commits changed is copied once. sqlite's default, 1,000
  pages, meant a checkpoint every other commit. The WAL stays bounded: it
  exceeds this size by one commit at most and is cut back to it once
  checkpointed (``journal_size_limit``), unless another connection keeps a
  read transaction open all that time, as in any sqlite database in WAL
  mode (the provider's own reads are short).
* ``temp_store=MEMORY``: the statement journal of the fold's multi-row
  upsert (a copy of every page it changes, kept to undo the statement
  alone) stays in memory rather than in a temporary file written on every
  commit.

None of these changes what a crash or a power cut leaves.

One run per topology. A run claims its topology's scope of the file
(:meth:`SQLiteStateProvider.claim`) before it touches any state: an
exclusive ``flock`` on ``<path>.<topology>.lock`` beside the database (the
topology's name URL-quoted), which holds the claimer's pid. A second
``statestream run`` of the same topology on the same file waits for it,
then stops with StateLockedError naming that pid; other topologies on the
file run beside it. ``flock`` rather than ``fcntl`` record locks because it
belongs to the open file description: the worker processes a supervisor
forks share its claim, and it ends when the last of them is gone (the
workers die with their supervisor). The lock files are left in place:
removing one would race with the next claimer.

A file that is not a sqlite database, or is one with another schema, raises
StateCorruptError and is never overwritten or read as empty.

The connection opens on first use (so a provider pickles and ships to
workers), and again in a forked child, which must not use its parent's.
"""

from __future__ import annotations

# The private names are the tests' (folds, a backend of their own, fork handling).
from .backend import _FOLD_BYTES as _FOLD_BYTES
from .backend import _FOLD_RECORDS as _FOLD_RECORDS
from .backend import _SQLiteBackend as _SQLiteBackend
from .database import _INHERITED as _INHERITED
from .database import APPLICATION_ID, SCHEMA_VERSION, SQLiteDatabase
from .provider import DEFAULT_PATH, SQLiteStateProvider
from .records import decode_delta, encode_delta, encode_plain_delta, merge_records

__all__ = [
    "APPLICATION_ID",
    "DEFAULT_PATH",
    "SCHEMA_VERSION",
    "SQLiteDatabase",
    "SQLiteStateProvider",
    "decode_delta",
    "encode_delta",
    "encode_plain_delta",
    "merge_records",
]
