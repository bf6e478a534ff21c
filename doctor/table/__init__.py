"""The results table: runs as Parquet rows by night and node (`rows`, `parquet`), read through DuckDB (`query`)."""
