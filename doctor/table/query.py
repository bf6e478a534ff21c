"""The results table read through DuckDB (embedded, in-process): a folder or an object-store prefix of it.

`fleet TABLE` asks two questions of it: the newest run of each node (its rows, for tonight's view) and, with
`--since`, every compared measure of every night from then on (for the drift). DuckDB reads only the columns and
the night partitions a question needs; the rows come back as the fleet's facts, scrubbed
(`ds_doctor.table.rows.facts_from_rows`). A remote prefix (s3://, gs://, https://) goes through DuckDB's httpfs
extension, installed once by the user (fleet downloads nothing); where it is not, that is one line.

One file that does not read (a Parquet file cut short, anything else named `*.parquet` in a shared table) fails a
read of the whole table: then the table's files are read apart (`readable`), each one that does not read is named
as unreadable, and the questions are asked again of the rest. A node's run dated in the future is never its newest
(`ds_doctor.fleet.facts.future_dated`): it is named and left out.
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
from ds_doctor.fleet.facts import CLOCK_SKEW, NodeFacts, future_reason
from ds_doctor.reports.fleet import Unreadable
from ds_doctor.reports.model import FAILING
from ds_doctor.table.parquet import EXTRA, TableError
from ds_doctor.table.rows import NAMES, facts_from_rows

MEMORY = "1GB"  # DuckDB spills past this rather than take the box
#: An object-store prefix DuckDB reads through its httpfs extension (`fleet` tells one from a folder by it too)
REMOTE = re.compile(r"(s3|s3a|gs|gcs|az|abfss|https?)://", re.IGNORECASE)
#: The DuckDB variable that holds the files to read once some are left out (a list too long for the query's text)
FILES_VARIABLE = "ds_doctor_files"


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


def _source(con: Any, roots: list[str], only: list[str] | None = None) -> str:
    """A `read_parquet` over every root (or `only` these files of them), its partitions as typed columns (a node
    named 0042 stays text)."""
    if any(REMOTE.match(root) for root in roots):
        try:  # never a download from here: a cluster node reaches nothing it was not told to
            con.execute("LOAD httpfs")
        except Exception as exc:
            raise TableError(
                f"{roots[0]}: DuckDB's httpfs extension is not installed ({str(exc).splitlines()[0][:120]}): "
                """install it once (python -c "import duckdb; duckdb.sql('INSTALL httpfs')") or copy the prefix """
                "to a folder"
            ) from None
    if only is None:
        paths = "[" + ", ".join(_quote(files(root)) for root in roots) + "]"
    else:
        con.execute(f"SET VARIABLE {FILES_VARIABLE} = ?", [only])
        paths = f"getvariable('{FILES_VARIABLE}')"
    return (
        f"read_parquet({paths}, hive_partitioning = true, "
        "hive_types = {'night': DATE, 'node': VARCHAR}, filename = true)"
    )


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def read_tables(
    roots: list[str], since: dt.date | None, unreadable: list[Unreadable] | None = None
) -> tuple[list[NodeFacts], list[Series]]:
    """(the facts of each node's newest run, and with `since` each node's measures fitted across the nights from
    it on). Two questions whose answers are small whatever the table's size: the newest file of each node (then
    only those files are read), and the series fitted inside DuckDB (one row per node, case and measure). Each file
    left out (it does not read, or its run is dated in the future) is one entry of `unreadable`."""
    left_out = unreadable if unreadable is not None else []
    con = connect()
    try:
        try:
            facts, series, future = _answers(con, _source(con, roots), since)
        except TableError:
            raise
        # duckdb.Error and its kin: a file that is not Parquet, a glob that matches nothing
        except Exception as exc:
            if "No files found" in str(exc):
                return [], []
            good, bad = readable(con, _table_files(con, roots))
            if not bad or not good:  # no one file to blame, or no file that reads: the table does not read
                more = f" (and {len(bad) - 1} more unreadable file(s))" if len(bad) > 1 else ""
                raise _unreadable_table(roots, RuntimeError(bad[0][1]) if bad else exc, more) from None
            left_out += [Unreadable(path, f"not a readable Parquet file: {why}") for path, why in bad]
            try:
                facts, series, future = _answers(con, _source(con, roots, good), since)
            except TableError:
                raise
            except Exception as again:
                raise _unreadable_table(roots, again) from None
    finally:
        con.close()
    left_out += future
    return facts, series


def _unreadable_table(roots: list[str], exc: Exception, more: str = "") -> TableError:
    return TableError(f"cannot read the results table {roots[0]}: {_first_line(exc)}{more}")


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def _answers(
    con: Any, source: str, since: dt.date | None
) -> tuple[list[NodeFacts], list[Series], list[Unreadable]]:
    """The two questions asked of `source`, and the files left out of both: a node's run dated later than now by
    more than CLOCK_SKEW, so that it never stands as the node's newest."""
    cutoff = dt.datetime.now(dt.timezone.utc) + CLOCK_SKEW
    night = "night >= ?" if since is not None else "true"
    params = [since] if since is not None else []
    per_node = con.execute(
        f"SELECT arg_max(filename, started_at) FILTER (WHERE started_at <= ?), "
        f"list(struct_pack(path := filename, at := started_at)) FILTER (WHERE started_at > ?) "
        f"FROM {source} WHERE kind = 'node' AND {night} GROUP BY node",
        [cutoff, cutoff, *params],
    ).fetchall()
    newest = sorted(path for path, _ in per_node if path is not None)
    future = sorted((run["path"], run["at"]) for _, later in per_node for run in later or [])
    left_out = [Unreadable(str(path), future_reason("started_at", at.isoformat())) for path, at in future]
    if not newest:
        return [], [], left_out
    columns = ", ".join(f'"{name}"' for name in NAMES)
    failing = ", ".join(_quote(outcome.value) for outcome in FAILING)
    files = ", ".join(_quote(path) for path in newest)
    cursor = con.execute(
        f"""
        SELECT {columns} FROM read_parquet([{files}])
        WHERE kind IN ('node', 'fingerprint') OR (kind = 'measure' AND compared)
           OR (kind = 'case' AND outcome IN ({failing})) OR (kind = 'finding' AND severity = 'error')
        """
    )
    facts = facts_from_rows(_dicts(cursor))
    series = _series(con, source, since, cutoff) if since is not None else []
    return facts, series, left_out


def _table_files(con: Any, roots: list[str]) -> list[str]:
    """Every file of the tables, as DuckDB's glob finds them (regular files: a FIFO or a device is not listed)."""
    found: list[str] = []
    for root in roots:
        found += [str(path) for (path,) in con.execute("SELECT file FROM glob(?)", [files(root)]).fetchall()]
    return sorted(found)


def readable(con: Any, paths: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """(the files that read, (file, why not) for each that does not), every column of each read: files are read
    in halves, a half that reads is taken whole and one that does not is halved again, so a few bad files among
    many cost a few reads each, not one read per file."""
    columns = ", ".join(f'"{name}"' for name in NAMES)
    good: list[str] = []
    bad: list[tuple[str, str]] = []
    batches = [paths] if paths else []
    while batches:
        batch = batches.pop()
        try:
            con.execute(f"SELECT sum(hash({columns})) FROM read_parquet(?)", [batch]).fetchall()
        except Exception as exc:  # duckdb.Error and its kin, as the whole read raised them
            if len(batch) == 1:
                bad.append((batch[0], _first_line(exc)))
            else:
                half = len(batch) // 2
                batches += [batch[half:], batch[:half]]
            continue
        good += batch
    return sorted(good), sorted(bad)


#: `ds_doctor.fleet.drift.fitted` in SQL: each night's latest value of a node's compared measure, as a ratio to
#: that night's median over the nodes with the same GPUs (where MIN_FLEET ran it; else the series' own median),
#: its logarithm fitted against the days since the series' first night.
SERIES = """
WITH v AS (
    SELECT host, gpus, "case", measure, night, arg_max(value, started_at) AS value
    FROM {source}
    WHERE kind = 'measure' AND compared AND night >= ? AND started_at <= ? AND value > 0 AND isfinite(value)
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


def _series(con: Any, source: str, since: dt.date, cutoff: dt.datetime) -> list[Series]:
    found = []
    query = SERIES.format(source=source, fleet=MIN_FLEET, nights=MIN_NIGHTS)
    for host, gpus, case, measure, n, first, last, v0, v1, slope, sxx, syy, sxy in con.execute(
        query, [since, cutoff]
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
