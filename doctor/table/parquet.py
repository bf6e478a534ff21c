"""The results table written: one Parquet file per node and run, under `night=<UTC date>/node=<host>/`.

Hive-style partitions every engine reads as columns (DuckDB's `hive_partitioning`, pyarrow's `partitioning="hive"`,
Spark, Trino, BigQuery external tables). Each file is written whole beside its name and renamed into place: a reader
never sees half a file, and a second run of one node in one night is a second file, never an overwrite.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ds_doctor.files import foreign_in_path, safe_component
from ds_doctor.reports.model import Report
from ds_doctor.table.rows import COLUMNS, night_of, node_parts, rows_of

EXTRA = "table"  # setup.cfg's extra that brings pyarrow and DuckDB


class TableError(Exception):
    """One line: the table cannot be written or read (no pyarrow or DuckDB, a folder refused, a bad file)."""


def require_pyarrow() -> Any:
    """pyarrow, or a TableError saying how to get it (checked when the option is parsed, before a run starts)."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        raise TableError(
            f"writing the results table needs pyarrow ({exc}): pip install 'ds-doctor[{EXTRA}]'"
        ) from None
    return pyarrow


def schema() -> Any:
    pa = require_pyarrow()
    types = {
        "string": pa.string(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "int32": pa.int32(),
        "float64": pa.float64(),
        "bool": pa.bool_(),
    }
    return pa.schema([(name, types[kind]) for name, kind in COLUMNS])


def write_table(report: Report, root: Path, run: str) -> list[Path]:
    """`report` as rows under `root` (one file per node of it); the paths written."""
    pa = require_pyarrow()
    import pyarrow.parquet as pq

    written = []
    night = night_of(report.started_at).isoformat()
    for facts, part in node_parts(report, run):
        folder = root / f"night={night}" / f"node={safe_component(facts.host)}"
        # a table folder may be shared: a `night=`/`node=` link another user planted there is never followed
        if (found := foreign_in_path(folder)) is not None:
            raise TableError(
                f"cannot write the results table under {root}: {found[0]} is a link owned by another user "
                f"(uid {found[1]}), which ds-doctor does not follow"
            )
        try:
            folder.mkdir(parents=True, exist_ok=True)
            table = pa.Table.from_pylist(rows_of(facts, part, run), schema=schema())
            handle, temporary = tempfile.mkstemp(prefix=".", suffix=".parquet.part", dir=folder)
            os.close(handle)
            try:
                pq.write_table(table, temporary, compression="zstd")
                target = _place(temporary, folder, run)
            finally:
                os.unlink(temporary)
        except OSError as exc:
            raise TableError(f"cannot write the results table under {root}: {exc.strerror or exc}") from None
        written.append(target)
    return written


def _place(temporary: str, folder: Path, run: str) -> Path:
    """The written file linked in under `run`'s name, or the first free `run-N` (never over another file)."""
    for attempt in range(100):
        path = folder / (f"{run}.parquet" if attempt == 0 else f"{run}-{attempt}.parquet")
        try:
            os.link(temporary, path)
        except FileExistsError:
            continue
        return path
    raise TableError(f"{folder}: 100 files named {run}: not writing another")
