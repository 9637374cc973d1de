#!/usr/bin/env python3
"""Sync the day's store transactions (a CSV file) into the `orders` table of an SQLite
or PostgreSQL database, so that running it again, or after a crash, never duplicates a
row.

Two layers make it safe to re-run:
- a UNIQUE index on the source transaction id, with INSERT OR IGNORE: a row already in
  the table is turned away (counted as skipped), whatever run inserted it;
- each row carries the slot's idempotency key (JOBGUARD_IDEMPOTENCY_KEY, the same for
  every attempt at one scheduled slot) and the run id (JOBGUARD_RUN_ID), so an operator
  can see which slot and which attempt wrote it.

Rows are committed in batches. The database uses WAL with synchronous=FULL, so every
committed batch survives a power cut; a cut leaves a partial table, and the next run
inserts the rest. The whole CSV is checked before the first insert: a bad file changes
nothing.

Environment (relative paths are relative to the working directory):
  STORE_SYNC_CSV         input CSV (default: transactions.csv; if that default file is
                         missing it is generated with gen_transactions.py and a note on
                         stderr; a missing file named here explicitly is an error)
  STORE_SYNC_DB          SQLite database (default: orders.db), created if missing; or a
                         postgres:// or postgresql:// URL (needs python3-psycopg2):
                         the orders table is created there if missing
  STORE_SYNC_BATCH_SIZE  rows per commit (default: 100)
  STORE_SYNC_PAUSE_MS    pause after each committed batch, in milliseconds (default: 0),
                         to make a run slow enough to be cut in the middle
  JOBGUARD_IDEMPOTENCY_KEY, JOBGUARD_RUN_ID   stored with each row (set by jobguard run)
  JOBGUARD_REPORT        if set, counters are appended to this file as key=value lines:
                         rows_read, rows_inserted, rows_skipped, batch

Exit status: 0 on success (also when every row was already there), 64 for a bad
setting, 65 for a bad CSV, 66 when the CSV named in STORE_SYNC_CSV does not exist.
"""

import csv
import os
import sqlite3
import sys
import time

EX_USAGE = 64
EX_DATAERR = 65
EX_NOINPUT = 66

DEFAULT_CSV = "transactions.csv"
DEFAULT_DB = "orders.db"
HEADER = ["txn_id", "store", "sku", "qty", "amount_cents", "timestamp"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id              INTEGER PRIMARY KEY,
    txn_id          TEXT    NOT NULL,
    store           TEXT    NOT NULL,
    sku             TEXT    NOT NULL,
    qty             INTEGER NOT NULL,
    amount_cents    INTEGER NOT NULL,
    txn_time        TEXT    NOT NULL,
    idempotency_key TEXT,
    run_id          TEXT,
    synced_at       TEXT    NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS orders_txn_id ON orders (txn_id);
"""

INSERT = """
INSERT OR IGNORE INTO orders
    (txn_id, store, sku, qty, amount_cents, txn_time, idempotency_key, run_id, synced_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
"""


PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (
    id              BIGSERIAL PRIMARY KEY,
    txn_id          TEXT    NOT NULL UNIQUE,
    store           TEXT    NOT NULL,
    sku             TEXT    NOT NULL,
    qty             INTEGER NOT NULL,
    amount_cents    BIGINT  NOT NULL,
    txn_time        TEXT    NOT NULL,
    idempotency_key TEXT,
    run_id          TEXT,
    synced_at       TEXT    NOT NULL
)
"""

PG_INSERT = """
INSERT INTO orders
    (txn_id, store, sku, qty, amount_cents, txn_time, idempotency_key, run_id, synced_at)
VALUES %s
ON CONFLICT (txn_id) DO NOTHING
RETURNING 1
"""


class Failure(Exception):
    """An error with the exit status it should end the program with."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def env_int(name, default, minimum):
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise Failure(EX_USAGE, "%s=%r is not a whole number" % (name, raw)) from None
    if value < minimum:
        raise Failure(EX_USAGE, "%s=%d is below %d" % (name, value, minimum))
    return value


def find_csv():
    """The input path. A missing default file is generated (the data is invented anyway,
    and a first trial run should just work); a missing explicit file is an error."""
    explicit = os.environ.get("STORE_SYNC_CSV", "")
    if explicit:
        if not os.path.exists(explicit):
            raise Failure(EX_NOINPUT, "%s: no such file (from STORE_SYNC_CSV)" % explicit)
        return explicit
    if not os.path.exists(DEFAULT_CSV):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import gen_transactions

        rows = gen_transactions.write_csv(DEFAULT_CSV)
        print(
            "sync.py: %s was missing: generated %d invented transactions" % (DEFAULT_CSV, rows),
            file=sys.stderr,
        )
    return DEFAULT_CSV


def read_rows(path):
    """All rows of the CSV as tuples (txn_id, store, sku, qty, amount_cents, timestamp),
    checked; raises Failure(EX_DATAERR) naming the file and line of the first bad row."""
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header != HEADER:
            raise Failure(EX_DATAERR, "%s:1: header is %r, expected %r" % (path, header, HEADER))
        for row in reader:
            where = "%s:%d" % (path, reader.line_num)
            if len(row) != len(HEADER):
                raise Failure(EX_DATAERR, "%s: %d fields, expected %d" % (where, len(row), len(HEADER)))
            txn_id, store, sku, qty, amount, stamp = row
            if not txn_id or not store or not sku or not stamp:
                raise Failure(EX_DATAERR, "%s: empty field" % where)
            try:
                qty_n = int(qty)
                amount_n = int(amount)
            except ValueError:
                raise Failure(EX_DATAERR, "%s: qty and amount_cents must be whole numbers" % where) from None
            if qty_n <= 0 or amount_n < 0:
                raise Failure(EX_DATAERR, "%s: qty must be positive and amount_cents not negative" % where)
            rows.append((txn_id, store, sku, qty_n, amount_n, stamp))
    return rows


def batch_label(rows):
    """The business day(s) the transactions belong to, e.g. "2026-11-28"."""
    if not rows:
        return "empty"
    first = min(r[5] for r in rows)[:10]
    last = max(r[5] for r in rows)[:10]
    return first if first == last else "%s..%s" % (first, last)


class SqliteOrders:
    """The orders table in an SQLite file: autocommit mode, WAL with synchronous=FULL (in
    WAL mode NORMAL may lose the last commits on power loss, FULL fsyncs every commit)."""

    def __init__(self, path):
        self.db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        mode = self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if mode.lower() != "wal":
            raise Failure(1, "%s: could not switch to WAL (journal_mode is %s)" % (path, mode))
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)

    def insert(self, batch):
        """Insert one batch in one transaction; returns how many rows were new."""
        before = self.db.total_changes
        self.db.execute("BEGIN IMMEDIATE")
        try:
            self.db.executemany(INSERT, batch)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return self.db.total_changes - before

    def txn_ids(self):
        """Every order's transaction id, in the order they were synced."""
        return [r[0] for r in self.db.execute("SELECT txn_id FROM orders ORDER BY id")]

    def close(self):
        self.db.close()


class PostgresOrders:
    """The orders table in PostgreSQL (each batch one transaction; the server's own
    durability applies)."""

    def __init__(self, url):
        try:
            import psycopg2
            import psycopg2.extras
        except ImportError:
            raise Failure(EX_USAGE, "STORE_SYNC_DB is a PostgreSQL URL, which needs python3-psycopg2")
        self.extras = psycopg2.extras
        try:
            self.db = psycopg2.connect(url, connect_timeout=10)
        except psycopg2.Error as e:
            raise Failure(1, "cannot connect to PostgreSQL: %s" % str(e).strip())
        with self.db, self.db.cursor() as cur:
            # Several hosts may create the table at once: serialize on an advisory lock.
            cur.execute("SELECT pg_advisory_xact_lock(hashtext('store-sync orders'))")
            cur.execute(PG_SCHEMA)

    def insert(self, batch):
        with self.db, self.db.cursor() as cur:
            return len(self.extras.execute_values(cur, PG_INSERT, batch, fetch=True))

    def txn_ids(self):
        with self.db, self.db.cursor() as cur:
            cur.execute("SELECT txn_id FROM orders ORDER BY id")
            return [r[0] for r in cur.fetchall()]

    def close(self):
        self.db.close()


def open_db(target):
    """The orders table at `target`: a PostgreSQL URL or an SQLite file path."""
    if target.startswith(("postgres://", "postgresql://")):
        return PostgresOrders(target)
    return SqliteOrders(target)


def sync(db, rows, batch_size, pause_ms, key, run_id):
    """Insert `rows` in batches; returns the number of rows inserted."""
    inserted = 0
    for start in range(0, len(rows), batch_size):
        synced_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        batch = [r + (key, run_id, synced_at) for r in rows[start : start + batch_size]]
        inserted += db.insert(batch)
        if pause_ms:
            time.sleep(pause_ms / 1000.0)
    return inserted


def main():
    try:
        batch_size = env_int("STORE_SYNC_BATCH_SIZE", 100, 1)
        pause_ms = env_int("STORE_SYNC_PAUSE_MS", 0, 0)
        csv_path = find_csv()
        db_path = os.environ.get("STORE_SYNC_DB", "") or DEFAULT_DB
        rows = read_rows(csv_path)
        key = os.environ.get("JOBGUARD_IDEMPOTENCY_KEY") or None
        run_id = os.environ.get("JOBGUARD_RUN_ID") or None
        db = open_db(db_path)
        try:
            inserted = sync(db, rows, batch_size, pause_ms, key, run_id)
        finally:
            db.close()
    except Failure as e:
        print("sync.py: %s" % e, file=sys.stderr)
        return e.status

    label = batch_label(rows)
    skipped = len(rows) - inserted
    report = os.environ.get("JOBGUARD_REPORT", "")
    if report:
        with open(report, "a", encoding="utf-8") as f:
            f.write("rows_read=%d\n" % len(rows))
            f.write("rows_inserted=%d\n" % inserted)
            f.write("rows_skipped=%d\n" % skipped)
            f.write("batch=%s\n" % label)
    print(
        "store-sync: read %d, inserted %d, skipped %d (batch %s) from %s into %s"
        % (len(rows), inserted, skipped, label, csv_path, db_path)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
