"""`--junit FILE` (`--junitxml`, as pytest spells it): JUnit XML for Jenkins and GitLab (`ds_doctor.reports.junit`)."""

from __future__ import annotations

from ds_doctor.formats import OutputFormat, Target, WriteContext, text_file
from ds_doctor.reports.model import Report


def render(report: Report, context: WriteContext) -> str:
    from ds_doctor.reports.junit import render_junit

    return render_junit(report)


FORMAT = OutputFormat(
    name="junit",
    options=("--junit", "--junitxml"),
    help="Also write JUnit XML (Jenkins, GitLab); --junitxml as pytest spells it.",
    target=Target.FILE,
    write=text_file(render),
    label="JUnit XML",
)
