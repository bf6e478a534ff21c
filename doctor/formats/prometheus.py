"""`--prometheus FILE`: node_exporter textfile-collector metrics (`ds_doctor.reports.prometheus`); with `run
--baseline`, each measure's ratio to the baseline's, and the tolerance."""

from __future__ import annotations

from ds_doctor.formats import OutputFormat, Target, WriteContext, text_file
from ds_doctor.reports.model import Report


def render(report: Report, context: WriteContext) -> str:
    from ds_doctor.reports.prometheus import render_prometheus

    return render_prometheus(report, context.baseline, context.tolerance_pct)


FORMAT = OutputFormat(
    name="prometheus",
    options=("--prometheus",),
    help="Also write node_exporter textfile-collector metrics.",
    target=Target.FILE,
    write=text_file(render),
    label="Prometheus metrics",
)
