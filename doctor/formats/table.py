"""`--table DIR`: the results as rows of a Parquet table under `night=…/node=…` (`ds_doctor.table.parquet`), which
`fleet` reads; pyarrow (the `table` extra) is checked for before anything runs."""

from __future__ import annotations

from pathlib import Path

from ds_doctor.formats import FormatError, OutputFormat, Target, WriteContext
from ds_doctor.reports.model import Report


def require() -> None:
    from ds_doctor.table.parquet import TableError, require_pyarrow

    try:
        require_pyarrow()
    except TableError as exc:
        raise FormatError(str(exc)) from None


def write(report: Report, folder: Path, context: WriteContext) -> list[Path]:
    """One file per node of the report, named after its run."""
    from ds_doctor.run.build import report_basename
    from ds_doctor.table.parquet import TableError, write_table

    try:
        return write_table(report, folder, report_basename(report))
    except TableError as exc:
        raise FormatError(str(exc)) from None


FORMAT = OutputFormat(
    name="table",
    options=("--table",),
    help="Also write the results as rows of a Parquet table in this folder, under night=…/node=… "
    "(`fleet` reads it; so do DuckDB, pyarrow, Spark). Needs the `table` extra.",
    target=Target.FOLDER,
    write=write,
    requires=require,
    # a run a signal stopped adds no rows (its report, JUnit and Prometheus files are written)
    stopped_runs=False,
)
