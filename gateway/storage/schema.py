"""The stored-responses database: connection settings and the versioned schema."""

from __future__ import annotations

import sqlite3
from pathlib import Path

SCHEMA_VERSION = 1

# one row per stored response; `seq` orders them by insertion (the count bound prunes the lowest)
SCHEMA = """
CREATE TABLE responses (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX responses_created_at ON responses (created_at);
CREATE TABLE input_items (
    response_seq INTEGER NOT NULL REFERENCES responses (seq) ON DELETE CASCADE,
    pos INTEGER NOT NULL,
    id TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (response_seq, pos)
) WITHOUT ROWID;
CREATE INDEX input_items_id ON input_items (response_seq, id);
"""


class SchemaError(RuntimeError):
    """The database file was written by a newer rapid-mlx (or is not ours)."""


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating if needed) the database at PATH in WAL mode with the current schema.

    WAL with `synchronous=NORMAL`: a commit is in the WAL file (the OS page cache) when
    `commit()` returns, so the death of the gateway process, even by SIGKILL, never loses a
    committed row; only an OS crash or power loss may lose the last commits, which FULL would
    prevent at the cost of an fsync per response.
    """
    conn = sqlite3.connect(path, isolation_level=None)  # autocommit; transactions are explicit
    path.chmod(0o600)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA busy_timeout=5000")
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version == 0:
        conn.execute("BEGIN IMMEDIATE")
        if conn.execute("PRAGMA user_version").fetchone()[0] == 0:  # another process won
            for stmt in filter(str.strip, SCHEMA.split(";")):
                conn.execute(stmt)
            conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("COMMIT")
    elif version > SCHEMA_VERSION:
        conn.close()
        raise SchemaError(f"{path} has schema version {version}, newer than this rapid-mlx "
                          f"understands ({SCHEMA_VERSION}); upgrade, or use another --data-dir")
    return conn


class transaction:  # noqa: N801 - used as a context manager, like a function
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error) on an autocommit connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")
