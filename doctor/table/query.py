"""The results table read through DuckDB (embedded, in-process): a folder or an object-store prefix of it.

`fleet TABLE` asks two questions of it: the newest run of each node (its rows, for tonight's view) and, with
`--since`, every compared measure of every night from then on (for the drift). DuckDB reads only the columns and
the night partitions a question needs; the rows come back as the fleet's facts, scrubbed
(`ds_doctor.table.rows.facts_from_rows`). A remote prefix (s3://, gs://, https://) goes through DuckDB's httpfs
extension, installed once by the user (fleet downloads nothing); where it is not, that is one line.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from typing import Any

from ds_doctor.fleet.drift import NightValue
from ds_doctor.fleet.facts import NodeFacts
from ds_doctor.reports.records import FAILING
from ds_doctor.table.parquet import EXTRA, TableError
from ds_doctor.table.rows import NAMES, facts_from_rows

MEMORY = "1GB"  # DuckDB spills past this rather than take the box
REMOTE = re.compile(r"(s3|s3a|gs|gcs|az|abfss|https?)://", re.IGNORECASE)


def connect() -> Any:
    try:
        import duckdb
    except ImportError as exc:
        raise TableError(
            f"reading the results table needs DuckDB ({exc}): pip install 'ds-doctor[{EXTRA}]'"
        ) from None
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    con = duckdb.connect(
        config={"memory_limit": MEMORY, "threads": threads, "autoinstall_known_extensions": False}
    )
    con.execute("SET enable_progress_bar = false")  # its bar drawn on the user's terminal
    return con


def files(root: str) -> str:
    """The glob of a table's files under `root` (`night=…/node=…/*.parquet`)."""
    return root.rstrip("/") + "/night=*/node=*/*.parquet"


def _source(con: Any, roots: list[str]) -> str:
    """A `read_parquet` over every root, its partitions as typed columns (a node named 0042 stays text)."""
    if any(REMOTE.match(root) for root in roots):
        try:  # never a download from here: a cluster node reaches nothing it was not told to
            con.execute("LOAD httpfs")
        except Exception as exc:
            raise TableError(
                f"{roots[0]}: DuckDB's httpfs extension is not installed ({str(exc).splitlines()[0][:120]}): "
                """install it once (python -c "import duckdb; duckdb.sql('INSTALL httpfs')") or copy the prefix """
                "to a folder"
            ) from None
    globs = ", ".join(_quote(files(root)) for root in roots)
    return (
        f"read_parquet([{globs}], hive_partitioning = true, union_by_name = true, "
        "hive_types = {'night': DATE, 'node': VARCHAR})"
    )


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def read_tables(roots: list[str], since: dt.date | None) -> tuple[list[NodeFacts], list[NightValue]]:
    """(the facts of each node's newest run, and with `since` every compared measure of each night from it on)."""
    con = connect()
    try:
        source = _source(con, roots)
        night = "night >= ?" if since is not None else "true"
        params = [since] if since is not None else []
        columns = ", ".join(f'"{name}"' for name in NAMES)
        failing = ", ".join(_quote(outcome.value) for outcome in FAILING)
        newest = f"""
            WITH t AS (SELECT * FROM {source} WHERE {night}),
            latest AS (SELECT node, arg_max(run, started_at) AS run FROM t WHERE kind = 'node' GROUP BY node)
            SELECT {columns} FROM t JOIN latest USING (node, run)
            WHERE kind IN ('node', 'fingerprint') OR (kind = 'measure' AND compared)
               OR (kind = 'case' AND outcome IN ({failing})) OR (kind = 'finding' AND severity = 'error')
        """
        cursor = con.execute(newest, params)
        facts = facts_from_rows(_dicts(cursor))
        nights: list[NightValue] = []
        if since is not None:
            query = f"""
                SELECT host, gpus, "case", measure, night, value, CAST(started_at AS VARCHAR)
                FROM {source} WHERE kind = 'measure' AND compared AND night >= ?
            """
            nights = [
                NightValue(str(h), str(g), str(c), str(m), n, float(v), a)
                for h, g, c, m, n, v, a in con.execute(query, params).fetchall()
            ]
    except TableError:
        raise
    except (
        Exception
    ) as exc:  # duckdb.Error and its kin: a file that is not Parquet, a glob that matches nothing
        if "No files found" in str(exc):
            return [], []
        raise TableError(
            f"cannot read the results table {roots[0]}: {str(exc).splitlines()[0][:200]}"
        ) from None
    finally:
        con.close()
    return facts, nights


def _dicts(cursor: Any, batch: int = 10_000) -> Any:
    names = [d[0] for d in cursor.description]
    while rows := cursor.fetchmany(batch):
        for row in rows:
            yield dict(zip(names, row, strict=True))
