"""results.json -> JUnit XML, so CI test reporters show every candidate as a test.

One suite per problem; one case per candidate (the baseline included), failed when the verifier
rejected it; one skipped case per transformation the search skipped. junit_xml has no
per-testcase <properties>, which pytest and GitLab read, so `_Suite` adds them.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from junit_xml import TestCase, TestSuite, to_xml_report_string

from bot.core.results import ProblemResult, Results
from bot.core.results_contenders import ContenderResult
from bot.report import data as rd

_MESSAGE_MAX_CHARS = 500  # failure `message` is an attribute: reporters show it on one line


class _Suite(TestSuite):
    """A TestSuite whose test cases may carry their own <properties>."""

    def __init__(self, name: str, cases: list[tuple[TestCase, dict[str, str]]], **kwargs: Any):
        super().__init__(name, [c for c, _ in cases], **kwargs)
        self.case_properties = [p for _, p in cases]

    def build_xml_doc(self, encoding: str | None = None) -> ET.Element:
        element = super().build_xml_doc(encoding)
        for case, case_element, props in zip(self.test_cases, element.findall("testcase"), self.case_properties):
            if case.elapsed_sec:  # junit_xml writes "%f": 1 us resolution, too coarse for kernels
                case_element.set("time", f"{case.elapsed_sec:.9f}")
            if props:
                holder = ET.Element("properties")
                for key, value in props.items():
                    ET.SubElement(holder, "property", {"name": key, "value": value})
                case_element.insert(0, holder)
        return element


def _num(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def _elapsed_s(contender: ContenderResult) -> float | None:
    """One call of every shape: the sum of per-shape medians, in seconds."""
    medians = [rd.median_us(s) for s in contender.shapes]
    medians = [m for m in medians if m is not None]
    return sum(medians) / 1e6 if medians else None


def _case(
    problem: str, contender: ContenderResult, name: str, min_speedup: float | None
) -> tuple[TestCase, dict[str, str]]:
    case = TestCase(name, classname=f"kernel-bot.{problem}", elapsed_sec=_elapsed_s(contender))
    ci = contender.speedup_ci or None
    props = {
        "role": contender.role or "candidate",
        "status": contender.status or rd.MISSING,
        "speedup": _num(contender.speedup),
        "speedup_ci_low": _num(ci[0]) if ci else "",
        "speedup_ci_high": _num(ci[1]) if ci else "",
        "speedup_text": rd.fmt_speedup(contender.speedup, ci) if contender.speedup else "",
        "median_us": _num(contender.median_us),
    }
    significant = contender.significant  # attempts only
    if significant is not None:
        props["significant"] = str(bool(significant)).lower()
    props = {k: v for k, v in props.items() if v}  # absent numbers are left out, not written as ""
    if contender.accepted is False:
        reasons = rd.rejection_reasons(contender) or ["rejected (no reason recorded)"]
        check = reasons[0].split(":", 1)[0].strip()
        case.add_failure_info(message=reasons[0][:_MESSAGE_MAX_CHARS], output="\n".join(reasons), failure_type=check)
    elif contender.speedup is not None and min_speedup is not None:
        verdict = "significant" if significant else "not significant"
        speedup = rd.fmt_speedup(contender.speedup, ci)
        case.stdout = f"verified; {speedup} ({verdict} at {min_speedup}x)"
    return case, props


def _suite(problem: ProblemResult) -> _Suite:
    name = problem.problem
    min_speedup = problem.min_speedup
    contenders = [problem.baseline] if problem.baseline else []
    contenders += list(problem.attempts)
    seen: dict[str, int] = {}
    cases = []
    for contender in contenders:
        label = contender.name
        seen[label] = seen.get(label, 0) + 1
        # Reporters merge cases by (classname, name): a repeat (an LLM round re-proposing a
        # candidate under the same name) gets a suffix instead of vanishing.
        cases.append(_case(name, contender, label if seen[label] == 1 else f"{label} #{seen[label]}", min_speedup))
    if rd.failed_problem(problem):  # could not be evaluated at all: an error, not a skip
        case = TestCase("evaluation", classname=f"kernel-bot.{name}")
        case.add_error_info(message=str(problem.error or "failed")[:1000])
        cases.append((case, {"role": "problem"}))
    for skipped in problem.skipped:
        case = TestCase(skipped.transformation, classname=f"kernel-bot.{name}")
        case.add_skipped_info(message=skipped.reason or "skipped")
        cases.append((case, {"role": "skipped"}))
    value, ci = rd.best_speedup(problem)
    env, best = problem.environment, problem.best
    properties = {
        "outcome": str(problem.outcome or rd.MISSING),
        "best": best.name if best else "",
        "best_speedup": _num(value) if best else "",
        "best_speedup_ci": f"{ci[0]!r},{ci[1]!r}" if best and ci else "",
        "top_speedup": rd.fmt_speedup(value, ci),
        "min_speedup": _num(min_speedup),
        "device": (env.device if env else "") or "",
        "device_name": (env.device_name if env else "") or "",
        "torch": (env.torch if env else "") or "",
    }
    return _Suite(name, cases, properties=properties, hostname=(env.host if env else "") or None)


def render_junit(results: Results) -> str:
    """JUnit XML for `results`: a suite per problem, a case per candidate and skipped transformation."""
    return to_xml_report_string([_suite(p) for p in rd.problems(results)])
