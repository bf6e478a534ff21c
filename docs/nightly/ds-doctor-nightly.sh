#!/usr/bin/env bash
# One node's nightly hardware smoke: run ds-doctor, publish JUnit and Prometheus output, and diff the
# run against this node's baseline report. Exit code: ds-doctor's (0 healthy, 1 a case failed or the
# node regressed against its baseline, 2 usage, 3 the doctor broke).
#
# Settings (environment): DS_DOCTOR (the command, default `ds-doctor`), STATE_DIR (per-node reports
# and baselines, default /var/lib/ds-doctor), LEVEL (default 2), TOLERANCE (percent, default 10),
# TEXTFILE_DIR (node_exporter's textfile directory), KEEP_DAYS (report retention, default 30),
# EXTRA_ARGS (more `ds-doctor run` arguments, e.g. "--anonymize --timeout 600"), TABLE_DIR (where set: the
# results table, Parquet rows by night and node, for `ds-doctor fleet TABLE_DIR --since 30d`; needs the
# `table` extra).
set -uo pipefail

DS_DOCTOR=${DS_DOCTOR:-ds-doctor}
STATE_DIR=${STATE_DIR:-/var/lib/ds-doctor}
LEVEL=${LEVEL:-2}
TOLERANCE=${TOLERANCE:-10}
TEXTFILE_DIR=${TEXTFILE_DIR:-/var/lib/node_exporter/textfile_collector}
KEEP_DAYS=${KEEP_DAYS:-30}

host=$(hostname -s)
node_dir="$STATE_DIR/$host"
baseline="$node_dir/baseline.json"
reports="$node_dir/reports"
mkdir -p "$reports" "$TEXTFILE_DIR" || exit 2

args=(run --level "$LEVEL" --out "$reports" --junit "$node_dir/junit.xml" --prometheus "$TEXTFILE_DIR/ds_doctor.prom")
if [ -n "${TABLE_DIR:-}" ]; then
    args+=(--table "$TABLE_DIR")
fi
if [ -n "${EXTRA_ARGS:-}" ]; then
    read -ra extra <<< "$EXTRA_ARGS"
    args+=("${extra[@]}")
fi
if [ -f "$baseline" ]; then
    args+=(--baseline "$baseline" --tolerance "$TOLERANCE")
fi
# DS_DOCTOR may be several words ("python -m ds_doctor.cli"): split on purpose
# shellcheck disable=SC2086
$DS_DOCTOR "${args[@]}"
rc=$?

latest=$(ls -t "$reports"/ds-doctor-*.json 2>/dev/null | head -n 1)
if [ ! -f "$baseline" ] && [ "$rc" -eq 0 ] && [ -n "$latest" ]; then
    cp "$latest" "$baseline"  # the node's first healthy run becomes its baseline
    echo "ds-doctor-nightly: $latest is now the baseline of $host"
fi
find "$reports" -maxdepth 1 -mtime +"$KEEP_DAYS" -name 'ds-doctor-*' -delete 2>/dev/null
find "$reports" -maxdepth 1 -mtime +"$KEEP_DAYS" -type d -name 'run-*' -exec rm -rf {} + 2>/dev/null
exit "$rc"
