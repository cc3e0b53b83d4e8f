"""The stored-responses database: connection settings and the versioned schema."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

log = logging.getLogger("rapid_mlx.gateway")

SCHEMA_VERSION = 2
WAL_LIMIT = 4 << 20  # bytes the WAL file keeps after a checkpoint (a bigger commit grows it)

# one row per stored response; `seq` orders them by insertion (the count and byte bounds prune the
# lowest); `size` is the bytes of its JSON (body and input items), before `body` so that reading
# it never walks a large body's overflow pages
RESPONSES = """CREATE TABLE responses (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    size INTEGER NOT NULL,
    body BLOB NOT NULL
)"""
CREATED_AT = "CREATE INDEX responses_created_at ON responses (created_at)"
ITEMS = ("""CREATE TABLE input_items (
    response_seq INTEGER NOT NULL REFERENCES responses (seq) ON DELETE CASCADE,
    pos INTEGER NOT NULL,
    id TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (response_seq, pos)
) WITHOUT ROWID""", "CREATE INDEX input_items_id ON input_items (response_seq, id)")
# the total of `size`, kept by the triggers in the transaction of every insert and delete
USAGE = ("CREATE TABLE usage (one INTEGER PRIMARY KEY CHECK (one = 1), bytes INTEGER NOT NULL)",
         "INSERT INTO usage VALUES (1, 0)",
         "CREATE TRIGGER usage_add AFTER INSERT ON responses "
         "BEGIN UPDATE usage SET bytes = bytes + new.size; END",
         "CREATE TRIGGER usage_sub AFTER DELETE ON responses "
         "BEGIN UPDATE usage SET bytes = bytes - old.size; END")
SCHEMA = (RESPONSES, CREATED_AT, *ITEMS, *USAGE)
# version 1 had no `size` and no usage: rebuild responses with the sizes it held
FROM_V1 = ("CREATE TABLE responses_v2 " + RESPONSES.removeprefix("CREATE TABLE responses "),
           "INSERT INTO responses_v2 SELECT seq, id, owner, created_at, length(body) + "
           "(SELECT coalesce(sum(length(i.body)), 0) FROM input_items i "
           "WHERE i.response_seq = r.seq), body FROM responses r",
           "DROP TABLE responses", "ALTER TABLE responses_v2 RENAME TO responses",
           CREATED_AT, *USAGE, "UPDATE usage SET bytes = (SELECT coalesce(sum(size), 0) "
                               "FROM responses)")


class SchemaError(RuntimeError):
    """The database file was written by a newer rapid-mlx (or is not ours)."""


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating if needed) the database at PATH in WAL mode with the current schema.

    WAL with `synchronous=NORMAL`: a commit is in the WAL file (the OS page cache) when
    `commit()` returns, so the death of the gateway process, even by SIGKILL, never loses a
    committed row; only an OS crash or power loss may lose the last commits, which FULL would
    prevent at the cost of an fsync per response.

    `auto_vacuum=INCREMENTAL` (set before WAL and the tables, as SQLite requires) lets the store
    give freed pages back to the file system; a database made without it (rapid-mlx before
    session 13) is rebuilt once by VACUUM here.
    """
    conn = sqlite3.connect(path, isolation_level=None)  # autocommit; transactions are explicit
    path.chmod(0o600)
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # applies to a new file (else at VACUUM)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"PRAGMA journal_size_limit={WAL_LIMIT}")
    conn.execute("PRAGMA busy_timeout=5000")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        conn.close()
        raise SchemaError(f"{path} has schema version {version}, newer than this rapid-mlx "
                          f"understands ({SCHEMA_VERSION}); upgrade, or use another --data-dir")
    if version < SCHEMA_VERSION:
        _upgrade(conn, version)
    conn.execute("PRAGMA foreign_keys=ON")
    if conn.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
        log.warning("%s: one-time VACUUM to enable incremental auto-vacuum", path)
        conn.execute("VACUUM")
    return conn


def _upgrade(conn: sqlite3.Connection, version: int) -> None:
    """Create the schema (VERSION 0) or migrate it to SCHEMA_VERSION, in one transaction."""
    conn.execute("PRAGMA foreign_keys=OFF")  # the rebuild drops the parent of input_items
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # another process may have
        steps = {0: SCHEMA, 1: FROM_V1}.get(version, ())
        for stmt in steps:
            conn.execute(stmt)
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


class transaction:  # noqa: N801 - used as a context manager, like a function
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error) on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")
