"""Reports from results.json: PR body, sticky comment, step summary, JUnit XML, chart PNG, plan.

The base payload comes from a real `bot optimize` run on CPU (once per module); the improved,
target-less and rejected-only problems are hand-made variants of it with known numbers, so the
rendered rows can be asserted exactly.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import ROOT, typed

from bot.core.domain import Trigger
from bot.report.junit import render_junit
from bot.report.markdown import (
    GITHUB_BODY_MAX_CHARS,
    REPORT_MARKER,
    STEP_SUMMARY_MAX_BYTES,
    STICKY_MARKER,
    render_comment,
    render_pr_body,
    render_step_summary,
)
from bot.report.plan import CHART_PATH, plan_pull_request

REPRO = "bot optimize problems/swiglu.py --device cpu --out results"
H200 = {
    "device": "cuda",
    "device_name": "NVIDIA H200",
    "torch": "2.7.0+cu128",
    "triton": "3.3.0",
    "cuda": "12.8",
    "driver": "570.86.15",
    "python": "3.11.7",
    "clocks": {"clocks.sm": "1980", "clocks.mem": "3201"},
    "host": "runner-1",
}
CANDIDATE_SOURCE = '''"""A faster SwiGLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def forward(self, x):
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate).mul_(up)
'''
PR = Trigger(
    kind="pull_request",
    repo="acme/kernels",
    action="labeled",
    pr_number=12,
    base_ref="main",
    base_sha="b" * 40,
    head_ref="feature/swiglu",
    head_sha="a" * 40,
    head_repo="acme/kernels",
    default_branch="main",
)
FORK = Trigger(
    kind="pull_request",
    repo="acme/kernels",
    action="labeled",
    pr_number=13,
    base_ref="main",
    base_sha="b" * 40,
    head_ref="patch-1",
    head_sha="c" * 40,
    head_repo="mallory/kernels",
    default_branch="main",
)
NIGHTLY = Trigger(kind="schedule", repo="acme/kernels", default_branch="trunk")
ALLOWED = lambda path: path.startswith(("kernels/", "docs/kernel-bot/"))  # noqa: E731


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("optimize")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "bot",
            "optimize",
            "problems/swiglu.py",
            "--device",
            "cpu",
            "--time-cap-s",
            "0.5",
            "--budget-s",
            "300",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=900,
    )
    return json.loads((out / "results.json").read_text())


def _improved(real: dict, name: str, target: str | None, env: dict | None = None) -> dict:
    """The real swiglu problem with a winner of known numbers: 52.13 us -> 36.68 us."""
    p = copy.deepcopy(real["problems"][0])
    p.update(problem=name, target=target, outcome="improved", environment=env or p["environment"])
    attempt = p["attempts"][0]
    shape = dict(
        attempt["shapes"][0],
        speedup=1.4213,
        speedup_ci=[1.3812, 1.4749],
        significance="faster",  # the verdict of these numbers, whatever the real run's shape said
        measurement={"median_us": 36.68, "iqr_us": 1.0, "n": 50},
        pct_of_floor=81.3,
        floor_us=29.8,
        max_abs_err=0.02734,
        norm_rel_err=0.002429,
    )
    attempt.update(speedup=1.4213, speedup_ci=[1.3812, 1.4749], significant=True, shapes=[shape], median_us=36.68)
    p["baseline"]["shapes"][0]["measurement"] = {"median_us": 52.13, "iqr_us": 1.2, "n": 50}
    p["baseline"]["median_us"] = 52.13
    p["best"] = {
        "name": attempt["name"],
        "path": None,
        "source": CANDIDATE_SOURCE,
        "speedup": 1.4213,
        "speedup_ci": [1.3812, 1.4749],
        "origin": attempt["origin"],
        "shapes": [shape],
    }
    return p


def _rejected_only(real: dict) -> dict:
    p = copy.deepcopy(real["problems"][0])
    p.update(problem="softmax", target=None, best=None, outcome="no significant improvement")
    reasons = [
        ["values: element (3, 7) got 0, expected 1.5"],
        ["no new threads: 1 new thread(s)"],
        ["values: normwise rel err 0.4 > 0.01"],
    ]
    p["attempts"] = [
        dict(
            copy.deepcopy(real["problems"][0]["attempts"][0]),
            name=f"bad-{i}",
            accepted=False,
            status="rejected",
            reasons=r,
            reason="; ".join(r),
            speedup=None,
            speedup_ci=None,
            median_us=None,
            shapes=[],
        )
        for i, r in enumerate(reasons)
    ]
    return p


@pytest.fixture(scope="module")
def mixed(real) -> dict:
    return {
        "schema_version": 1,
        "problems": [
            _improved(real, "swiglu", "kernels/swiglu_torch.py", H200),
            _improved(real, "gelu", None, H200),
            _rejected_only(real),
        ],
    }


ROW = "| swiglu | small | bfloat16[64, 512] | 52.1 | 36.7 | 1.42x [1.38, 1.47] | 81% | 2.7e-02 | 2.4e-03 |"


# -- markdown --------------------------------------------------------------------------------


def test_pr_body_has_row_environment_verification_reproduce_and_marker(mixed):
    body = render_pr_body(typed(mixed), REPRO, "docs/kernel-bot/speedups.png")
    assert ROW in body
    assert "**2 of 3 operators improved** on NVIDIA H200" in body
    assert (
        "| NVIDIA H200 | 570.86.15 | 12.8 | 2.7.0+cu128 | 3.3.0 | 3.11.7 | clocks.sm=1980, clocks.mem=3201 |"
    ) in body
    assert f"```sh\n{REPRO}\n```" in body and "![speedups](docs/kernel-bot/speedups.png)" in body
    assert (
        "softmax**: no significant improvement: no candidate was both verified and timed (3 tried, 3 rejected)"
    ) in body
    assert "| softmax | 3 | 3 | values ×2, no new threads ×1 |" in body
    assert (
        "8 distributions (standard normal, shifted and scaled, large magnitude, all zero, "
        "rows of mixed scale from 0 to 128, near the dtype's range, "
        "rows whose mean is 128 to 8192 times their spread, values near zero mixed with large ones)"
    ) in body
    assert "CUDA-event time" in body and "roofline" in body
    assert body.rstrip().endswith(REPORT_MARKER) and body.count(REPORT_MARKER) == 1


def test_distributions_a_problem_skips_are_named_with_their_reason(mixed):
    assert mixed["problems"][0]["distributions"] == [
        *("standard", "shifted", "large", "zeros", "rows", "limits", "offset", "mixed")
    ]
    results = copy.deepcopy(mixed)
    results["problems"][2]["skipped_distributions"] = {"zeros": "log of the | inputs, @team: positive"}
    body = render_pr_body(typed(results), REPRO, None)
    assert "; softmax skips all zero: log of the \\| inputs, @\u200bteam: positive." in body


def test_real_cpu_run_is_reported_honestly(real):
    body, comment = render_pr_body(typed(real), REPRO, None), render_comment(typed(real), None, None)
    problem = real["problems"][0]
    assert f"| {problem['environment']['device_name']} |" in body
    assert "host clock" in body and "hence n/a" in body and "![speedups]" not in body
    if problem["best"] is None:
        assert "swiglu**: no significant improvement: best " in comment
        assert "**0 of 1 operator improved**" in comment
    assert comment.startswith(STICKY_MARKER)


def test_comment_carries_the_fork_patch_and_caps_it():
    results = {"problems": []}
    small = render_comment(typed(results), "diff --git a/x b/x\n+```\n", "https://example.invalid/pr/1")
    assert "````diff\ndiff --git a/x b/x\n+```\n````" in small  # a longer fence than the patch's
    assert "https://example.invalid/pr/1" in small
    huge = "".join(f"+line {i} {'x' * 80}\n" for i in range(5000))
    capped = render_comment(typed(results), huge, None)
    assert len(capped) <= GITHUB_BODY_MAX_CHARS and "The patch is truncated" in capped


def test_hostile_names_cannot_inject_markup_or_mentions(mixed):
    hostile = copy.deepcopy(mixed)
    hostile["problems"][0]["best"]["name"] = f"x | {REPORT_MARKER} @octocat <img src=x>"
    body = render_pr_body(typed(hostile), REPRO, None)
    assert body.count(REPORT_MARKER) == 1 and "@octocat" not in body and "<img" not in body


def test_step_summary_lists_every_attempt_and_stays_under_1_mib(mixed):
    summary = render_step_summary(typed(mixed))
    assert ROW in summary and "bad-2" in summary and "skipped" in summary
    big = copy.deepcopy(mixed)
    big["problems"][2]["attempts"] *= 4000
    capped = render_step_summary(typed(big))
    assert len(capped.encode()) <= STEP_SUMMARY_MAX_BYTES and "truncated" in capped


def test_sticky_marker_matches_the_github_client():
    github = pytest.importorskip("bot.github.client")
    assert STICKY_MARKER == github.STICKY_MARKER


# -- JUnit -----------------------------------------------------------------------------------


def test_junit_has_a_case_per_candidate_failures_and_skips(real, mixed):
    for results in (real, mixed):
        root = ET.fromstring(render_junit(typed(results)))
        suites = root.findall("testsuite")
        assert [s.get("name") for s in suites] == [p["problem"] for p in results["problems"]]
        for suite, p in zip(suites, results["problems"]):
            cases = suite.findall("testcase")
            assert {c.get("classname") for c in cases} == {f"kernel-bot.{p['problem']}"}
            run = [c for c in cases if c.find("skipped") is None]
            expected = [p["baseline"]["name"]] + [a["name"] for a in p["attempts"]]
            assert [c.get("name") for c in run] == expected
            assert len(cases) - len(run) == len(p["skipped"]) > 0
            failed = [c for c in run if c.find("failure") is not None]
            assert len(failed) == sum(not a["accepted"] for a in p["attempts"])
    softmax = ET.fromstring(render_junit(typed(mixed))).findall("testsuite")[2]
    failure = softmax.find("testcase[@name='bad-0']/failure")
    assert failure.get("type") == "values" and "got 0, expected 1.5" in failure.get("message")
    swiglu = ET.fromstring(render_junit(typed(mixed))).findall("testsuite")[0]
    props = {p.get("name"): p.get("value") for p in swiglu.findall("properties/property")}
    assert props["best_speedup"] == "1.4213" and props["best_speedup_ci"] == "1.3812,1.4749"
    winner = swiglu.findall("testcase")[1]
    case_props = {p.get("name"): p.get("value") for p in winner.findall("properties/property")}
    assert case_props["speedup_text"] == "1.42x [1.38, 1.47]"
    assert float(winner.get("time")) == pytest.approx(36.68e-6)  # seconds, at ns resolution


# -- plan ------------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path) -> Path:
    """A repository holding the original TARGET, as the PR's checkout would."""
    (tmp_path / "kernels").mkdir()
    shutil.copy(ROOT / "kernels" / "swiglu_torch.py", tmp_path / "kernels" / "swiglu_torch.py")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    return tmp_path


def test_pr_plan_replaces_the_target_and_adds_the_chart_but_no_new_module(mixed, repo):
    plan = plan_pull_request(typed(mixed), PR, repo, ALLOWED, b"\x89PNG fake", REPRO)
    assert (plan.branch, plan.base, plan.source_pr, plan.fork, plan.repo) == (
        "kernel-bot/pr-12",
        "feature/swiglu",
        12,
        False,
        "acme/kernels",
    )
    files = {f.path: f.content for f in plan.files}
    assert files["kernels/swiglu_torch.py"] == CANDIDATE_SOURCE.encode()
    assert set(files) == {"kernels/swiglu_torch.py", CHART_PATH}  # gelu declares no TARGET
    assert "gelu: the problem declares no `TARGET`" in plan.body
    assert files[CHART_PATH] == b"\x89PNG fake"
    assert plan.title == "kernel-bot: 1.42x faster swiglu and 1 more (verified on NVIDIA H200)"
    assert ROW in plan.body and REPORT_MARKER in plan.body
    assert f"![speedups](https://github.com/acme/kernels/raw/kernel-bot/pr-12/{CHART_PATH})" in plan.body
    assert ROW in plan.comment_body and "```diff" not in plan.comment_body and "pulls?q=" in plan.comment_body
    check = plan.check_run
    assert (check.name, check.head_sha, check.conclusion) == ("kernel-bot", "a" * 40, "success")
    assert check.title == "2 of 3 operators improved, best 1.42x [1.38, 1.47]" and ROW in check.summary
    # The patch applies to the original checkout and yields exactly the planned files.
    (repo / "kernel-bot.patch").write_text(plan.patch)
    subprocess.run(["git", "apply", "--check", "kernel-bot.patch"], cwd=repo, check=True)
    subprocess.run(["git", "apply", "kernel-bot.patch"], cwd=repo, check=True)
    assert (repo / "kernels/swiglu_torch.py").read_bytes() == files["kernels/swiglu_torch.py"]


def test_chart_path_is_configurable_never_a_candidates_and_can_be_off(mixed, repo):
    # Kernel paths that leave docs/ out do not keep the chart off the branch (it is drawn by
    # the publishing stage, not taken from the results); a chosen path moves it there.
    kernels_only = lambda path: path.startswith("kernels/")  # noqa: E731
    plan = plan_pull_request(typed(mixed), PR, repo, kernels_only, b"\x89PNG fake", REPRO, "perf/chart.png")
    assert {f.path: f.content for f in plan.files}["perf/chart.png"] == b"\x89PNG fake"
    assert CHART_PATH not in {f.path for f in plan.files} and "/perf/chart.png)" in plan.body
    plan = plan_pull_request(typed(mixed), PR, repo, kernels_only, b"\x89PNG fake", REPRO, "")
    assert not any(f.path.endswith(".png") for f in plan.files) and "![speedups]" not in plan.body
    # A candidate whose TARGET is the chart's path never writes it.
    # Then nothing is left to replace (gelu declares no TARGET), and a chart alone is no follow-up.
    plan = plan_pull_request(typed(mixed), PR, repo, ALLOWED, b"\x89PNG fake", REPRO, "kernels/swiglu_torch.py")
    assert plan.files == () and "swiglu_torch" not in plan.patch


def test_patch_handles_files_without_a_final_newline(tmp_path):
    from bot.report.plan import unified_patch

    (tmp_path / "k.py").write_text("a = 1\nb = 2")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "p.patch").write_text(unified_patch("k.py", "a = 1\nb = 2", "a = 1\nb = 3"))
    subprocess.run(["git", "apply", "p.patch"], cwd=tmp_path, check=True)
    assert (tmp_path / "k.py").read_text() == "a = 1\nb = 3"
    assert unified_patch("k.py", "same\n", "same\n") == ""


def test_disallowed_and_symlinked_targets_are_dropped_with_a_note(mixed, repo):
    plan = plan_pull_request(typed(mixed), PR, repo, lambda p: p != "kernels/swiglu_torch.py", None, REPRO)
    assert [f.path for f in plan.files] == []
    assert "`kernels/swiglu_torch.py` is outside the paths kernel-bot may write" in plan.body
    assert "swiglu_torch" not in plan.patch
    (repo / "kernels" / "swiglu_torch.py").unlink()
    os.symlink("/etc/hostname", repo / "kernels" / "swiglu_torch.py")
    plan = plan_pull_request(typed(mixed), PR, repo, ALLOWED, None, REPRO)
    assert "kernels/swiglu_torch.py" not in {f.path for f in plan.files} and "is a symlink" in plan.body


def test_fork_plan_puts_the_patch_in_the_comment_and_no_chart(mixed, repo):
    plan = plan_pull_request(typed(mixed), FORK, repo, ALLOWED, b"\x89PNG fake", REPRO)
    assert (plan.branch, plan.base, plan.source_pr, plan.fork) == ("kernel-bot/pr-13", "patch-1", 13, True)
    assert CHART_PATH not in {f.path for f in plan.files} and "![speedups]" not in plan.body
    assert "```diff\n" + plan.patch.rstrip("\n") in plan.comment_body and "git apply" in plan.comment_body
    assert plan.check_run.head_sha == "c" * 40


def test_nightly_plan_targets_the_default_branch(mixed, repo):
    plan = plan_pull_request(typed(mixed), NIGHTLY, repo, ALLOWED, None, REPRO)
    assert (plan.branch, plan.base, plan.source_pr, plan.comment_body, plan.fork) == (
        "kernel-bot/nightly",
        "trunk",
        None,
        None,
        False,
    )
    assert plan.check_run is None  # a schedule event names no commit to attach a check to
    manual = plan_pull_request(
        typed(mixed), Trigger(kind="workflow_dispatch", repo="acme/kernels"), repo, ALLOWED, None, REPRO
    )
    assert (manual.branch, manual.base) == ("kernel-bot/nightly", "main")


def test_no_improvement_is_none_at_night_and_a_comment_on_a_pr(real, mixed, repo):
    nothing = {"schema_version": 1, "problems": [mixed["problems"][2]]}
    assert plan_pull_request(typed(nothing), NIGHTLY, repo, ALLOWED, b"png", REPRO) is None
    plan = plan_pull_request(typed(nothing), PR, repo, ALLOWED, b"png", REPRO)
    assert plan.files == () and plan.patch == ""
    assert "softmax**: no significant improvement" in plan.comment_body
    assert plan.check_run.conclusion == "neutral"
    if real["problems"][0]["best"] is None:
        assert plan_pull_request(typed(real), NIGHTLY, repo, ALLOWED, None, REPRO) is None
        plan = plan_pull_request(typed(real), PR, repo, ALLOWED, None, REPRO)
        assert "no significant improvement: best" in plan.comment_body


def test_report_modules_do_not_import_matplotlib_or_pygithub():
    code = (
        "import sys; import bot.report.markdown, bot.report.junit, bot.report.chart, bot.report.plan; "
        "bad = {'matplotlib', 'github', 'torch'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_a_problem_that_could_not_be_evaluated_is_an_error_in_every_report(real, mixed):
    broken = {
        "problem": "swiglu_broken",
        "problem_path": "problems/swiglu_broken.py",
        "target": None,
        "best": None,
        "outcome": "failed",
        "error": "problems/swiglu_broken.py: get_inputs() returned int",
        "min_speedup": 1.05,
        "stopped": "failed",
        "wall_s": 0.0,
        "baseline": None,
        "attempts": [],
        "skipped": [],
        "environment": {},
        "llm": {},
    }
    results = {**mixed, "problems": [*mixed["problems"], broken]}
    summary = render_step_summary(typed(results))
    assert "2 of 4 operators improved" in summary and "1 could not be evaluated" in summary
    assert "- **swiglu_broken**: failed: problems/swiglu_broken.py: get_inputs() returned int" in summary
    assert "### swiglu_broken" not in summary  # nothing was measured: no attempts section
    assert "H200" in summary  # the environment still comes from a problem that measured something
    suite = ET.fromstring(render_junit(typed(results))).findall("testsuite")[-1]
    error = suite.find("testcase[@name='evaluation']/error")
    assert suite.get("name") == "swiglu_broken" and "get_inputs() returned int" in error.get("message")
    assert suite.get("errors") == "1"
