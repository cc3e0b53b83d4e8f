"""The stored-responses database: connection settings and the versioned schema."""

from __future__ import annotations

import hashlib
import logging
import sqlite3
from pathlib import Path

log = logging.getLogger("rapid_mlx.gateway")

SCHEMA_VERSION = 4
WAL_LIMIT = 4 << 20  # bytes the WAL file keeps after a checkpoint (a bigger commit grows it)
# What a row costs on disk beyond its JSON (its keys, its index entries, page slack), counted by
# the byte bounds with the JSON so that they bound the file (measured:
# an input_items row 25-30 bytes, an item body's row 190-400, a response's 130-280, without and
# with API keys). Kept in the triggers too: changing one takes a new schema version.
ITEM_ROW = 32
BODY_ROW = 256
RESPONSE_ROW = 192

# one row per stored response; `seq` orders them by insertion (the count and byte bounds prune the
# lowest); `size` is the bytes it takes stored alone (its body and its distinct item bodies, their
# rows' costs and those of its `items` input_items rows), so at least what deleting it frees: the
# byte bound's cut; both before `body` so that reading them never walks a large body's overflow
# pages
RESPONSES = """CREATE TABLE responses (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    size INTEGER NOT NULL,
    items INTEGER NOT NULL,
    body BLOB NOT NULL
)"""
CREATED_AT = "CREATE INDEX responses_created_at ON responses (created_at)"
# each distinct input item JSON of an owner, once, under its SHA-256 (and its `id`, for the
# `after` cursor of the item listing): the turns of a previous_response_id chain repeat the whole
# conversation, and share its items here
BODIES = ("""CREATE TABLE item_bodies (
    id INTEGER PRIMARY KEY,
    owner TEXT NOT NULL,
    hash BLOB NOT NULL,
    item_id TEXT NOT NULL,
    size INTEGER NOT NULL,
    body BLOB NOT NULL
)""", "CREATE UNIQUE INDEX item_bodies_key ON item_bodies (owner, hash)",
          "CREATE INDEX item_bodies_item_id ON item_bodies (owner, item_id)")
# a response's input items in order, each naming its body (a few bytes a row: a chain's turns
# repeat these rows, not the JSON); the references are counted by the index on body_id (a counter
# column would rewrite the body's row, overflow pages and all, at every turn): a body goes when
# the last item naming it goes, in the same statement
ITEMS = ("""CREATE TABLE input_items (
    response_seq INTEGER NOT NULL REFERENCES responses (seq) ON DELETE CASCADE,
    pos INTEGER NOT NULL,
    body_id INTEGER NOT NULL REFERENCES item_bodies (id),
    PRIMARY KEY (response_seq, pos)
) WITHOUT ROWID""", "CREATE INDEX input_items_body ON input_items (body_id, response_seq)",
         "CREATE TRIGGER item_unref AFTER DELETE ON input_items BEGIN "
         "DELETE FROM item_bodies WHERE id = old.body_id AND NOT EXISTS "
         "(SELECT 1 FROM input_items WHERE body_id = old.body_id); END")
# the bytes stored (response bodies and item bodies, each once, and every row's cost above) and
# the responses stored, per owner (owners: the retention bounds evict from the owner using the
# most, and the index on (owner, seq) finds its oldest), kept by the triggers in the transaction
# of every insert and delete, and in all (usage: their sum). An owner's row stays when it
# empties: one row per API key ever used, so the heaviest and the sum are found by reading them
# all (a page or two), cheaper than indexes on the totals, or a total of all, that every trigger
# would rewrite (measured)
OWNERS = ("CREATE TABLE owners (owner TEXT PRIMARY KEY, bytes INTEGER NOT NULL, "
          "count INTEGER NOT NULL) WITHOUT ROWID",
          "CREATE VIEW usage AS SELECT coalesce(sum(bytes), 0) AS bytes, "
          "coalesce(sum(count), 0) AS count FROM owners",
          "CREATE INDEX responses_owner ON responses (owner, seq)")
OWNER_INDEX = OWNERS[2]


def _add(table: str, size: str, count: int) -> str:
    """The trigger adding a row's SIZE (and COUNT responses) to the totals, its owner's too."""
    return (f"CREATE TRIGGER {table}_add AFTER INSERT ON {table} BEGIN "
            f"INSERT INTO owners VALUES (new.owner, {size}, {count}) ON CONFLICT (owner) DO UPDATE "
            f"SET bytes = bytes + excluded.bytes, count = count + excluded.count; END")


def _sub(table: str, size: str, count: int) -> str:
    """The trigger taking a deleted row's SIZE (and COUNT responses) off the totals."""
    return (f"CREATE TRIGGER {table}_sub AFTER DELETE ON {table} BEGIN "
            f"UPDATE owners SET bytes = bytes - ({size}), count = count - {count} "
            f"WHERE owner = old.owner; END")


RESPONSE_BYTES = f"length({{0}}.body) + {RESPONSE_ROW} + {{0}}.items * {ITEM_ROW}"
BODY_BYTES = f"{{0}}.size + {BODY_ROW}"
TRIGGERS = (_add("responses", RESPONSE_BYTES.format("new"), 1),
            _sub("responses", RESPONSE_BYTES.format("old"), 1),
            _add("item_bodies", BODY_BYTES.format("new"), 0),
            _sub("item_bodies", BODY_BYTES.format("old"), 0))
# the totals recomputed from the rows (at open, and by the upgrades)
RECOUNT = ("DELETE FROM owners",
           "INSERT INTO owners SELECT owner, sum(b), sum(n) FROM (SELECT owner, "
           f"{RESPONSE_BYTES.format('responses')} AS b, 1 AS n FROM responses UNION ALL "
           f"SELECT owner, {BODY_BYTES.format('item_bodies')}, 0 FROM item_bodies) GROUP BY owner")


def _refill(target: str, source: str) -> str:
    """Copy the responses of SOURCE into TARGET with their `items` and `size` computed from the
    input_items rows and item bodies (already in this schema) naming them."""
    return (f"INSERT INTO {target} (seq, id, owner, created_at, size, items, body) "
            f"SELECT seq, id, owner, created_at, length(body) + {RESPONSE_ROW} + n * {ITEM_ROW} "
            "+ b, n, body FROM (SELECT r.seq, r.id, r.owner, r.created_at, r.body, "
            "(SELECT count(*) FROM input_items i WHERE i.response_seq = r.seq) AS n, "
            f"(SELECT coalesce(sum(b.size + {BODY_ROW}), 0) FROM item_bodies b WHERE b.id IN "
            "(SELECT body_id FROM input_items WHERE response_seq = r.seq)) AS b "
            f"FROM {source} r)")


def _keep_seq(new: str, old: str) -> tuple[str, str]:
    """Make NEW's AUTOINCREMENT continue after the highest seq OLD ever gave (never reused)."""
    return (f"INSERT INTO sqlite_sequence (name, seq) SELECT '{new}', 0 WHERE NOT EXISTS "
            f"(SELECT 1 FROM sqlite_sequence WHERE name = '{new}')",
            f"UPDATE sqlite_sequence SET seq = (SELECT max(seq) FROM sqlite_sequence WHERE name "
            f"IN ('{new}', '{old}')) WHERE name = '{new}'")


SCHEMA = (RESPONSES, CREATED_AT, *BODIES, *ITEMS, *OWNERS, *TRIGGERS)
# version 1 held each item's JSON in input_items (a chain's turns each a whole copy) and had no
# sizes: move its tables aside, create this schema, fill it (the item bodies, the items naming
# them, then the responses with their sizes), drop the old tables. Foreign keys are off meanwhile.
# The same steps take the layout briefly merged as version 2 before items were shared (sizes and
# a usage table, items still whole in input_items): its usage goes first.
FROM_V1 = ("DROP TRIGGER IF EXISTS usage_add", "DROP TRIGGER IF EXISTS usage_sub",
           "DROP TABLE IF EXISTS usage", "DROP INDEX input_items_id",
           "DROP INDEX responses_created_at",
           "ALTER TABLE input_items RENAME TO input_items_v1",
           "ALTER TABLE responses RENAME TO responses_v1", *SCHEMA,
           "INSERT OR IGNORE INTO item_bodies (owner, hash, item_id, size, body) "
           "SELECT r.owner, sha256(i.body), i.id, length(i.body), i.body FROM input_items_v1 i "
           "JOIN responses_v1 r ON r.seq = i.response_seq ORDER BY i.response_seq, i.pos",
           "INSERT INTO input_items SELECT i.response_seq, i.pos, b.id "
           "FROM input_items_v1 i JOIN responses_v1 r ON r.seq = i.response_seq "
           "JOIN item_bodies b ON b.owner = r.owner AND b.hash = sha256(i.body)",
           _refill("responses", "responses_v1"), *_keep_seq("responses", "responses_v1"),
           "DROP TABLE input_items_v1", "DROP TABLE responses_v1")
# version 2 kept one total (usage, a table: bytes only, by its triggers): the per-owner totals
# replace it, with the count, then as from version 3
FROM_V2 = ("DROP TRIGGER usage_add", "DROP TRIGGER usage_sub", "DROP TRIGGER usage_body_add",
           "DROP TRIGGER usage_body_sub", "DROP TABLE usage", *OWNERS[:2])
# version 3 counted only the JSON (a chain's input_items rows, repeated at every turn, went
# uncounted: 134 MB on disk for 0.38 MB counted): the responses table is rebuilt with `items`
# (before `body`, as SQLite's ALTER TABLE would add it after) and the sizes recomputed, the
# triggers made again with the rows' costs, and the rows counted once here
FROM_V3 = (RESPONSES.replace("TABLE responses", "TABLE responses_v4"),
           _refill("responses_v4", "responses"), *_keep_seq("responses_v4", "responses"),
           "DROP TABLE responses", "ALTER TABLE responses_v4 RENAME TO responses",
           CREATED_AT, OWNER_INDEX, "DROP TRIGGER IF EXISTS item_bodies_add",
           "DROP TRIGGER IF EXISTS item_bodies_sub", *TRIGGERS, *RECOUNT)


def sha256(data: bytes) -> bytes:
    """The SHA-256 digest of DATA: the key of an item body (and an SQL function, for FROM_V1)."""
    return hashlib.sha256(data).digest()


class SchemaError(RuntimeError):
    """The database file was written by a newer rapid-mlx (or is not ours)."""


def connect(path: Path) -> sqlite3.Connection:
    """Open (creating if needed) the database at PATH in WAL mode with the current schema.

    WAL with `synchronous=NORMAL`: a commit is in the WAL file (the OS page cache) when
    `commit()` returns, so the death of the gateway process, even by SIGKILL, never loses a
    committed row; only an OS crash or power loss may lose the last commits, which FULL would
    prevent at the cost of an fsync per response.

    `auto_vacuum=INCREMENTAL` (set before WAL and the tables, as SQLite requires) lets the store
    give freed pages back to the file system; a database made without it (by an earlier
    rapid-mlx) is rebuilt once by VACUUM here.
    """
    conn = sqlite3.connect(path, isolation_level=None)  # autocommit; transactions are explicit
    path.chmod(0o600)
    conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # applies to a new file (else at VACUUM)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"PRAGMA journal_size_limit={WAL_LIMIT}")
    conn.execute("PRAGMA busy_timeout=5000")
    version = _version(conn)
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


def _version(conn: sqlite3.Connection) -> int:
    """The schema version of the open database; 1 for the unreleased first layout of 2."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version == 2 and any(col[1] == "body" for col in
                            conn.execute("PRAGMA table_info(input_items)")):
        return 1
    return version


def _upgrade(conn: sqlite3.Connection, version: int) -> None:
    """Create the schema (VERSION 0) or migrate it to SCHEMA_VERSION, in one transaction."""
    conn.execute("PRAGMA foreign_keys=OFF")  # the rebuild drops the parent of input_items
    conn.create_function("sha256", 1, sha256, deterministic=True)
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _version(conn)  # another process may have upgraded it meanwhile
        steps = {0: SCHEMA, 1: FROM_V1, 2: FROM_V2 + FROM_V3, 3: FROM_V3}.get(version, ())
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
