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
import shutil
import tempfile
import weakref
from typing import Any

from ds_doctor.fleet.drift import MIN_FLEET, MIN_NIGHTS, Series
from ds_doctor.fleet.facts import NodeFacts
from ds_doctor.reports.records import FAILING
from ds_doctor.table.parquet import EXTRA, TableError
from ds_doctor.table.rows import NAMES, facts_from_rows

MEMORY = "1GB"  # DuckDB spills past this rather than take the box
#: An object-store prefix DuckDB reads through its httpfs extension (`fleet` tells one from a folder by it too)
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
    # where it spills past MEMORY: a private folder, never `.tmp` in the user's working directory
    spill = tempfile.mkdtemp(prefix="ds-doctor-duckdb-")
    con.execute(f"SET temp_directory = {_quote(spill)}")
    weakref.finalize(con, shutil.rmtree, spill, ignore_errors=True)
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
        f"read_parquet([{globs}], hive_partitioning = true, "
        "hive_types = {'night': DATE, 'node': VARCHAR}, filename = true)"
    )


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def read_tables(roots: list[str], since: dt.date | None) -> tuple[list[NodeFacts], list[Series]]:
    """(the facts of each node's newest run, and with `since` each node's measures fitted across the nights from
    it on). Two questions whose answers are small whatever the table's size: the newest file of each node (then
    only those files are read), and the series fitted inside DuckDB (one row per node, case and measure)."""
    con = connect()
    try:
        source = _source(con, roots)
        night = "night >= ?" if since is not None else "true"
        params = [since] if since is not None else []
        newest = con.execute(
            f"SELECT arg_max(filename, started_at) FROM {source} WHERE kind = 'node' AND {night} GROUP BY node",
            params,
        ).fetchall()
        if not newest:
            return [], []
        columns = ", ".join(f'"{name}"' for name in NAMES)
        failing = ", ".join(_quote(outcome.value) for outcome in FAILING)
        files = ", ".join(_quote(path) for (path,) in newest)
        cursor = con.execute(
            f"""
            SELECT {columns} FROM read_parquet([{files}])
            WHERE kind IN ('node', 'fingerprint') OR (kind = 'measure' AND compared)
               OR (kind = 'case' AND outcome IN ({failing})) OR (kind = 'finding' AND severity = 'error')
            """
        )
        facts = facts_from_rows(_dicts(cursor))
        series = _series(con, source, since) if since is not None else []
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
    return facts, series


#: `ds_doctor.fleet.drift.fitted` in SQL: each night's latest value of a node's compared measure, as a ratio to
#: that night's median over the nodes with the same GPUs (where MIN_FLEET ran it; else the series' own median),
#: its logarithm fitted against the days since the series' first night.
SERIES = """
WITH v AS (
    SELECT host, gpus, "case", measure, night, arg_max(value, started_at) AS value
    FROM {source}
    WHERE kind = 'measure' AND compared AND night >= ? AND value > 0 AND isfinite(value)
    GROUP BY host, gpus, "case", measure, night
),
m AS (
    SELECT gpus, "case", measure, night, CASE WHEN count(*) >= {fleet} THEN median(value) END AS med
    FROM v GROUP BY gpus, "case", measure, night
),
p AS (
    SELECT v.host, v.gpus, v."case", v.measure, v.night, v.value, m.med,
        median(v.value) OVER s AS own, count(*) OVER s AS n, min(v.night) OVER s AS first
    FROM v JOIN m USING (gpus, "case", measure, night)
    WINDOW s AS (PARTITION BY v.host, v.gpus, v."case", v.measure)
),
q AS (
    SELECT *, ln(value / coalesce(med, own)) AS y, CAST(date_diff('day', first, night) AS DOUBLE) AS x
    FROM p WHERE n >= {nights}
)
SELECT host, gpus, "case", measure, count(*), min(night), max(night), arg_min(value, night),
    arg_max(value, night), regr_slope(y, x), regr_sxx(y, x), regr_syy(y, x), regr_sxy(y, x)
FROM q GROUP BY host, gpus, "case", measure
"""


def _series(con: Any, source: str, since: dt.date) -> list[Series]:
    found = []
    query = SERIES.format(source=source, fleet=MIN_FLEET, nights=MIN_NIGHTS)
    for host, gpus, case, measure, n, first, last, v0, v1, slope, sxx, syy, sxy in con.execute(
        query, [since]
    ).fetchall():
        if slope is None or not sxx or n < 3:
            continue
        residual = max(syy - slope * sxy, 0.0)
        found.append(
            Series(
                str(host),
                str(gpus),
                str(case),
                str(measure),
                n,
                first,
                last,
                v0,
                v1,
                slope,
                (residual / (n - 2) / sxx) ** 0.5,
            )
        )
    return found


def _dicts(cursor: Any, batch: int = 10_000) -> Any:
    names = [d[0] for d in cursor.description]
    while rows := cursor.fetchmany(batch):
        for row in rows:
            yield dict(zip(names, row, strict=True))
