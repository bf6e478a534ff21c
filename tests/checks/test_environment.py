"""Node rules over the environment section: a missing numpy is named at level 1, before anything crosses ranks."""

from __future__ import annotations

from ds_doctor.checks.environment import environment_results, numpy_present
from ds_doctor.reports.model import Outcome, Severity


def test_torch_without_numpy_is_a_warning() -> None:
    (finding,) = numpy_present({"packages": {"torch": "2.13.0", "numpy": None}})
    assert (finding.invariant, finding.severity) == ("numpy_present", Severity.WARNING)
    assert "Numpy is not available" in finding.message and "pip install numpy" in finding.remedy
    assert numpy_present({"packages": {"torch": "2.13.0", "numpy": "2.3.1"}}) == []
    assert numpy_present({"packages": {"torch": None, "numpy": None}}) == []  # no torch: nothing to break


def test_one_result_only_when_a_rule_has_something_to_say() -> None:
    assert environment_results({"packages": {"torch": "2.13.0", "numpy": "2.3.1"}}) == []
    (result,) = environment_results({"packages": {"torch": "2.13.0"}})
    assert (result.case, result.outcome, result.level) == ("environment[node]", Outcome.PASS, 1)
