"""``PostgresSink``: each tuple a row of a PostgreSQL table, written exactly once per checkpoint.

A :class:`~statestream.connectors.TwoPhaseSink` (see there for the
protocol). At each COMMIT one transaction writes the checkpoint's rows and
moves the guard row ``(topology, sink, task) -> txid`` of the guard table
(``statestream_sink_guard``, created if missing); the guard is moved first,
with ``ON CONFLICT ... WHERE txid < new``, so a re-sent COMMIT finds it and
writes nothing, and two writers of one guard wait for each other on its
row lock. Rows go in batches, never one round trip per tuple:

* ``mode="append"``: every row once, in one ``INSERT ... SELECT`` from the
  batch sent as ONE JSON array parameter (``json_array_elements``, each
  value cast to its column's type): the stage's JSON text is the parameter as
  it is, so the client spends next to nothing a row (0.02 s of CPU for
  1,000,000 rows against 0.16-0.23 s for ``COPY ... write_row``, which would
  hold the interpreter lock the pipeline runs under); the server spends more
  (1.06 s against 0.22-0.29 s for COPY, bench/RESULTS-connectors.md), on
  its own process and core. Tables with a column
  of an array, composite or other non-scalar type (whose JSON text is not
  their input syntax) get ``COPY table (columns) FROM STDIN`` instead.
* ``mode="upsert"``: the same statement keeps the batch's last row per
  ``key`` (``DISTINCT ON (key) ... ORDER BY key, position DESC``; on the
  COPY path a dict pass in Python) and merges it with
  ``ON CONFLICT (key) DO UPDATE``: the table keeps the last value per key.
  With parallelism above 1, group the sink's input by ``fields(key)`` so
  that one task owns each key.

At start (``prepare``) the table and its columns are checked: a table that
is not there, a column it lacks, an upsert key without a unique index are
one :class:`~statestream.SinkError` naming table and columns. A row the
database refuses stops the run with the sink, task, row and the database's
message (the row is found again one at a time, on that error path only).
The DSN shows in messages with its password hidden.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from .._errors import ConfigError, SinkError
from ._broker import client_name, redact, require, target_unreachable
from .sink import TwoPhaseSink, last_of_each

__all__ = ["PostgresSink"]

GUARD_TABLE = "statestream_sink_guard"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
# pg_type.typcategory of the types whose text is what ->> gives of a JSON value:
# string, numeric, boolean, date/time, timespan, network, bit string, and the
# 'U'ser types json and jsonb (given -> instead of ->>).
_SCALAR = frozenset("SNBDTIV")
_JSON_TYPES = ("json", "jsonb")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class PostgresSink(TwoPhaseSink):
    """Writes each input tuple's values as one row of ``table`` (``columns``, in order).

    ``PostgresSink("counts", ["word", "n"], dsn="postgresql://...", mode="upsert",
    key=["word"])``. ``table`` may be schema-qualified (``"public.counts"``).
    """

    kind = "PostgresSink"

    def __init__(
        self,
        table: str,
        columns: Sequence[str],
        dsn: str = DEFAULT_DSN,
        mode: str = "append",
        key: Sequence[str] = (),
        guard_table: str = GUARD_TABLE,
    ) -> None:
        super().__init__()
        if mode not in ("append", "upsert"):
            raise ConfigError(f"PostgresSink mode {mode!r}: use 'append' or 'upsert'")
        if not columns:
            raise ConfigError(f"PostgresSink {table!r}: give the columns each tuple fills")
        if mode == "upsert" and not key:
            raise ConfigError(f"PostgresSink {table!r}: mode 'upsert' needs key=[columns]")
        missing = [k for k in key if k not in columns]
        if missing:
            raise ConfigError(
                f"PostgresSink {table!r}: key column(s) {missing} are not among columns {list(columns)}"
            )
        self.table = table
        self.columns = list(columns)
        self.dsn = self.url = dsn
        self.mode = mode
        self.key = list(key)
        self.guard_table = guard_table
        if mode == "upsert":
            # The table keeps the last row of each key: so does the stage.
            self.keep_last_by = operator.itemgetter(*(self.columns.index(k) for k in self.key))
        self._conn: Any = None
        self._insert: Any = None  # the JSON path's statement (_insert_sql)

    # -- SQL ---------------------------------------------------------------------------
    def _ident(self, name: str) -> Any:
        sql = self._sql
        return sql.Identifier(*name.split("."))

    def _columns_sql(self, names: Sequence[str]) -> Any:
        sql = self._sql
        return sql.SQL(", ").join(sql.Identifier(c) for c in names)

    # -- the target --------------------------------------------------------------------
    def open_target(self) -> None:
        psycopg = require("psycopg", "postgres", "PostgresSink")
        self._psycopg = psycopg
        self._sql = psycopg.sql
        try:
            # Named per task (pg_stat_activity.application_name): whose connection it is.
            conn = psycopg.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=10,
                application_name=client_name(self.context),
            )
        except psycopg.OperationalError as exc:
            raise target_unreachable(self.what, self.dsn, exc) from exc
        self._conn = conn
        try:
            self._check(conn)
        except BaseException:
            self._conn = None
            conn.close()
            raise

    def _check(self, conn: Any) -> None:
        """The table is there with the columns; the guard table is created if missing."""
        found = conn.execute(
            "SELECT to_regclass(%s)::oid", (self._regclass(self.table),)
        ).fetchone()
        if found is None or found[0] is None:
            raise SinkError(
                f"{self.what}: table {self.table!r} does not exist in {redact(self.dsn)}; "
                f"create it with the columns {self.columns}"
            )
        oid = found[0]
        types = {
            r[0]: (r[1], r[2], r[3])
            for r in conn.execute(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), t.typcategory, "
                "t.typname::text FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
                "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
                (oid,),
            )
        }
        have = list(types)
        lacking = [c for c in self.columns if c not in have]
        if lacking:
            raise SinkError(
                f"{self.what}: table {self.table!r} has no column(s) {lacking} (it has {have}); "
                "fix the sink's columns or the table"
            )
        if self.mode == "upsert":
            uniques = [
                set(r[0])
                for r in conn.execute(
                    "SELECT array_agg(a.attname::text) FROM pg_index i JOIN pg_attribute a "
                    "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                    "WHERE i.indrelid = %s AND i.indisunique GROUP BY i.indexrelid",
                    (oid,),
                )
            ]
            if set(self.key) not in uniques:
                raise SinkError(
                    f"{self.what}: table {self.table!r} has no primary key or unique index on "
                    f"{self.key}, which upsert needs (ON CONFLICT); add one"
                )
        self._insert = self._insert_sql(types)
        sql = self._sql
        # CREATE TABLE IF NOT EXISTS is not safe against itself: two sessions creating
        # the same table at once, one fails on pg_type's unique index (every sink task
        # of a first run with topology.workers or on Spark's executors starts at
        # once). A lock on the guard table's name, held to the end of the
        # transaction, makes the second wait and then find the table.
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.guard_table,))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (topology text NOT NULL, sink text NOT NULL, "
                    "task integer NOT NULL, txid bigint NOT NULL, "
                    "PRIMARY KEY (topology, sink, task))"
                ).format(self._ident(self.guard_table))
            )

    def _insert_sql(self, types: dict[str, tuple[str, str, str]]) -> Any:
        """``INSERT ... SELECT`` of the rows of one JSON array parameter (upsert: with
        its ``ON CONFLICT``), or None when a column's type needs COPY (module docstring)."""
        sql = self._sql
        values = []
        for i, column in enumerate(self.columns):
            typ, category, name = types[column]
            if name in _JSON_TYPES:
                values.append(sql.SQL("(r -> {})::{}").format(sql.Literal(i), sql.SQL(typ)))
            elif category in _SCALAR:
                values.append(sql.SQL("(r ->> {})::{}").format(sql.Literal(i), sql.SQL(typ)))
            else:
                return None
        into = sql.SQL("INSERT INTO {} ({})").format(
            self._ident(self.table), self._columns_sql(self.columns)
        )
        if self.mode == "append":
            return sql.SQL("{} SELECT {} FROM json_array_elements(%s::json) r").format(
                into, sql.SQL(", ").join(values)
            )
        # The last row of each key in the batch (ON CONFLICT cannot touch a row twice
        # in one statement), picked by the server: DISTINCT ON the key, latest first.
        keys = sql.SQL(", ").join(values[self.columns.index(k)] for k in self.key)
        return sql.SQL(
            "{} SELECT DISTINCT ON ({}) {} FROM json_array_elements(%s::json) "
            "WITH ORDINALITY AS e(r, i) ORDER BY {}, i DESC ON CONFLICT ({}) {}"
        ).format(
            into, keys, sql.SQL(", ").join(values), keys, self._columns_sql(self.key),
            self._on_conflict(),
        )  # fmt: skip

    def _on_conflict(self) -> Any:
        sql = self._sql
        rest = [c for c in self.columns if c not in self.key]
        if not rest:
            return sql.SQL("DO NOTHING")
        return sql.SQL("DO UPDATE SET {}").format(
            sql.SQL(", ").join(
                sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c))
                for c in rest
            )
        )

    @staticmethod
    def _regclass(name: str) -> str:
        return ".".join('"' + part.replace('"', '""') + '"' for part in name.split("."))

    def close_target(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def earlier_guards(self) -> list[tuple[str, int]]:
        """This task's guards of other lineages in the guard table (a connection of its
        own: the writing one belongs to the writer thread)."""
        psycopg = require("psycopg", "postgres", "PostgresSink")
        sql = psycopg.sql
        topology, sink, task = self.guard_key
        component = self.context.component_id
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
            rows = conn.execute(
                sql.SQL(
                    "SELECT sink, txid FROM {} WHERE topology = %s AND task = %s "
                    "AND (sink = %s OR starts_with(sink, %s)) AND sink <> %s"
                ).format(sql.Identifier(*self.guard_table.split("."))),
                (topology, task, component, component + "@", sink),
            ).fetchall()
        return [(str(name).partition("@")[2], int(txid)) for name, txid in rows]

    def guard(self) -> int:
        """The txid this task last wrote (-1 if none)."""
        sql = self._sql
        row = self._conn.execute(
            sql.SQL("SELECT txid FROM {} WHERE topology = %s AND sink = %s AND task = %s").format(
                self._ident(self.guard_table)
            ),
            self.guard_key,
        ).fetchone()
        return -1 if row is None else int(row[0])

    def write(self, rows: list[list[Any]], txid: int) -> bool:
        return self._write(txid, lambda: self._write_rows(rows), lambda: rows)

    def write_json(self, rows_json: str, txid: int) -> bool:
        if self._insert is None:
            return super().write_json(rows_json, txid)
        # On the JSON path the stage's text is the statement's parameter as it is,
        # never decoded (rows are decoded only to name a refused one).
        return self._write(
            txid,
            lambda: self._conn.execute(self._insert, (rows_json,)),
            lambda: orjson.loads(rows_json),
        )

    def _write(self, txid: int, put: Callable[[], Any], rows: Callable[[], Any]) -> bool:
        """In one transaction: the guard moved to ``txid`` (or nothing done if it was
        there), then ``put()``; a refused batch names its row from ``rows()``."""
        psycopg = self._psycopg
        try:
            with self._conn.transaction():
                if not self._move_guard(txid):
                    return False  # written before: a COMMIT sent again
                put()
            return True
        except (psycopg.DataError, psycopg.IntegrityError, psycopg.ProgrammingError) as exc:
            raise self._refused(rows(), exc) from exc

    def _move_guard(self, txid: int) -> bool:
        sql = self._sql
        moved = self._conn.execute(
            sql.SQL(
                "INSERT INTO {} AS g (topology, sink, task, txid) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (topology, sink, task) DO UPDATE SET txid = EXCLUDED.txid "
                "WHERE g.txid < EXCLUDED.txid RETURNING 1"
            ).format(self._ident(self.guard_table)),
            (*self.guard_key, txid),
        ).fetchone()
        return moved is not None

    def _write_rows(self, rows: list[list[Any]]) -> None:
        if self.keep_last_by is not None and self._insert is None:
            # The last value per key in this batch (ON CONFLICT cannot touch a row
            # twice in one statement; the stage holds one already, but a stage
            # written before keep_last_by may not): the JSON path's statement
            # picks them itself.
            rows = last_of_each(rows, self.keep_last_by)
        if self._insert is not None:
            try:
                batch = orjson.dumps(rows).decode()
            except TypeError:  # a value orjson cannot encode: psycopg's adapters may
                pass
            else:
                self._conn.execute(self._insert, (batch,))
                return
        self._copy_rows(rows)

    def _copy_rows(self, rows: list[list[Any]]) -> None:
        """COPY, for tables the JSON path cannot fill; an upsert through a temporary
        table merged with ``INSERT ... SELECT ... ON CONFLICT``."""
        sql, cur = self._sql, self._conn.cursor()
        target = self._ident(self.table)
        if self.mode == "upsert":
            target = sql.Identifier("statestream_stage")
            cur.execute(
                sql.SQL(
                    "CREATE TEMP TABLE IF NOT EXISTS {} (LIKE {} INCLUDING DEFAULTS "
                    "INCLUDING CONSTRAINTS) ON COMMIT DELETE ROWS"
                ).format(target, self._ident(self.table))
            )
        columns = self._columns_sql(self.columns)
        with cur.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(target, columns)) as copy:
            for row in rows:
                copy.write_row(row)
        if self.mode == "upsert":
            cur.execute(
                sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT ({}) {}").format(
                    self._ident(self.table), columns, columns, target,
                    self._columns_sql(self.key), self._on_conflict(),
                )
            )  # fmt: skip

    def _refused(self, rows: list[list[Any]], exc: BaseException) -> SinkError:
        """The error for a batch the database refused, naming the first refused row
        (found again one row at a time, in a transaction that is rolled back)."""
        bad: list[Any] | None = None
        reason = _first_line(exc)
        psycopg = self._psycopg
        try:
            with self._conn.transaction(force_rollback=True):
                for row in rows:
                    try:
                        with self._conn.transaction():
                            self._write_rows([row])
                    except psycopg.Error as one:
                        bad, reason = row, _first_line(one)
                        break
        except psycopg.Error:
            pass
        where = f"row {bad!r}" if bad is not None else f"a batch of {len(rows)} rows"
        return SinkError(f"{self.what}: table {self.table!r} refused {where}: {reason}")
