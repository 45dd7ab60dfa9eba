"""results.json -> markdown: the follow-up PR body, the sticky comment, the job step summary.

Pure functions of the typed results document (no timing, no network). Every number goes through the
formats in `bot.report.data`, so a speedup reads `1.42x [1.38, 1.47]` everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.core.distributions import DESCRIPTIONS, DISTRIBUTIONS
from bot.core.plausible import FLAG
from bot.core.results import ProblemResult, Results
from bot.core.results_contenders import ContenderResult
from bot.core.settings import OWN_ERROR_MULTIPLE, Device, TolerancePolicy
from bot.core.time_split import run_line
from bot.report import data as rd

REPORT_MARKER = "<!-- kernel-bot:report -->"
STICKY_MARKER = "<!-- kernel-bot:sticky -->"  # equals bot.github.client's (not imported: PyGithub)
GITHUB_BODY_MAX_CHARS = 65_536  # PR bodies and comments; GitHub answers 422 above it
STEP_SUMMARY_MAX_BYTES = 1_000_000  # GitHub refuses step summaries over 1 MiB
_TABLE_HEAD = (
    "| operator | shape | inputs | baseline µs | candidate µs | speedup [95% CI] "
    "| % of roofline floor | max abs err | normwise err |\n"
    "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
)


def _threshold(results: Results) -> float:
    return max((p.min_speedup or 1.0 for p in rd.problems(results)), default=1.0)


def summary_line(results: Results) -> str:
    total, better = len(rd.problems(results)), len(rd.improved(results))
    failed = sum(map(rd.failed_problem, rd.problems(results)))
    untimed = sum(1 for p in rd.problems(results) if p.not_timed)
    return (
        f"**{better} of {total} operator{'s' if total != 1 else ''} improved** on "
        f"{rd.cell(rd.device_label(results))} (claimed only when the 95% confidence "
        f"interval's lower bound clears {rd.fmt_ratio(_threshold(results))}x)."
        + (f" **{failed} could not be evaluated** (below)." if failed else "")
        + (f" {untimed} verified but not timed: they run under a simulator on this device (below)." if untimed else "")
    )


def results_table(results: Results) -> str:
    """One row per shape of each improved operator's best candidate; the rest listed honestly."""
    lines = []
    for p in rd.improved(results):
        for r in rd.shape_rows(p):
            lines.append(
                f"| {rd.cell(r.problem)} | {rd.cell(r.shape)} | {rd.cell(r.inputs)} "
                f"| {rd.fmt_us(r.baseline_us)} | {rd.fmt_us(r.candidate_us)} "
                f"| {rd.fmt_speedup(r.speedup, r.ci)} | {rd.fmt_pct(r.pct_of_floor)} "
                f"| {rd.fmt_err(r.max_abs_err)} | {rd.fmt_err(r.norm_rel_err)} |"
            )
    table = "\n".join([_TABLE_HEAD, *lines]) + "\n" if lines else ""  # a blank line ends the table
    out = [table] if table else []
    for p in rd.improved(results):
        best = p.best
        assert best is not None
        where = f"replaces `{rd.cell(p.target)}`" if p.target else "added as a new module"
        origin = (best.origin.detail or best.origin.strategy) if best.origin else None
        out.append(f"- **{rd.cell(p.problem)}**: `{rd.cell(best.name)}` ({rd.cell(origin)}), {where}.")
    claimed = {id(p) for p in rd.improved(results)}
    for p in rd.problems(results):
        name = f"- **{rd.cell(p.problem)}**"
        if rd.failed_problem(p):
            out.append(f"{name}: failed: {rd.cell(p.error, 500)}")
        elif p.not_timed:
            out.append(f"{name}: {not_timed(p)}")
        elif id(p) not in claimed:
            out.append(f"{name}: {no_improvement(p)}")
        if not rd.failed_problem(p) and implausible_flags(p):
            out.append(f"{name}: {implausible_flags(p)}")
    return "\n".join(out)


def not_timed(problem: ProblemResult) -> str:
    """One line: the operator's contenders were verified, and why none was timed for a claim."""
    tried, rejected, _ = rd.attempt_counts(problem)
    return (
        f"correct; not timed: {rd.cell(problem.not_timed)} (the baseline "
        f"`{rd.cell(problem.baseline.name if problem.baseline else None)}`; {tried - rejected} of {tried} "
        "candidates verified, none timed against it). Its times there measure the simulator, not the code."
    )


def implausible_flags(problem: ProblemResult) -> str:
    """The plausibility guard's flag with its evidence, for a human; empty when nothing was flagged."""
    flags = problem.implausible
    if not flags:
        return ""
    top = flags[0]
    more = f" ({len(flags)} candidates flagged)" if len(flags) > 1 else ""
    return (
        f"{FLAG}: `{rd.cell(top.name)}` measured "
        f"{rd.fmt_speedup(top.speedup, top.speedup_ci)}: {rd.cell(top.evidence, 400)}"
        f"{more}. Not claimed."
    )


def no_improvement(problem: ProblemResult) -> str:
    value, ci = rd.best_speedup(problem)
    tried, rejected, _ = rd.attempt_counts(problem)
    if value is None:
        return (
            f"no significant improvement: no candidate was both verified and timed "
            f"({tried} tried, {rejected} rejected)."
        )
    runner_up = rd.runner_up(problem)
    name = rd.cell(runner_up.name if runner_up else None)
    return f"no significant improvement: best {rd.fmt_speedup(value, ci)} (`{name}`)."


def verification(results: Results) -> str:
    """How the numbers were obtained, with this run's own counts and device."""
    env = rd.environment(results)
    cuda = env is not None and env.device == Device.CUDA
    ps = rd.problems(results)
    drawn = {d for p in ps for d in p.distributions or ()}
    dists = [d for d in DISTRIBUTIONS if d in drawn] + sorted(drawn - set(DISTRIBUTIONS)) or DISTRIBUTIONS
    precision = next((p.reference_precision for p in ps if p.reference_precision), None)
    kernelbench = any(p.tolerance == TolerancePolicy.KERNELBENCH for p in ps)
    has_floor = any(r.pct_of_floor is not None for p in ps for r in rd.shape_rows(p))
    lines = [
        "- **Inputs**: fresh for every trial, drawn from a secret seed after the candidate was "
        f"constructed, from {len(dists)} distributions "
        f"({', '.join(DESCRIPTIONS.get(d, rd.cell(d)) for d in dists)})"
        + "".join(
            f"; {rd.cell(p.problem)} skips {DESCRIPTIONS.get(d, rd.cell(d))}: {rd.cell(why)}"
            for p in ps
            for d, why in (p.skipped_distributions or {}).items()
        )
        + ".",
        "- **Reference**: computed in "
        + (
            "the problem's own dtype on the same device (`--tolerance kernelbench`)"
            if kernelbench
            else precision or "float64 (unless the problem declares otherwise)"
        )
        + " in a separate process; candidates ran in their own sandboxed workers and the parent compared "
        "outputs the workers never saw.",
        "- **Checks**: exact output type, shape, dtype and device; values "
        + (
            "by KernelBench's rule (`torch.allclose`, atol = rtol = 1e-4 for float32, 1e-2 for half types)"
            if kernelbench
            else f"within the dtype's tolerance, widened by {OWN_ERROR_MULTIPLE:g} times the problem's own error "
            "against the reference"
        )
        + ", with NaN/Inf positions matching; inputs unchanged by the call; no new threads; outputs of the "
        "timed calls checked as well; worker-reported times cross-checked against the parent's wall clock.",
        (
            "- **Timing**: device-synchronised time had to agree with CUDA-event time (no work hidden on "
            "other streams); "
            if cuda
            else f"- **Timing**: host clock on {rd.cell((env.device_name if env else None) or 'the CPU')} (the device-sync vs "  # noqa: E501
            "event-timing check applies on GPUs); "
        )
        + "baseline and candidates interleaved in random order in the same run, after warm-up, with "
        "caches flushed and inputs rotated, the baseline and the finalists each in two worker "
        "processes; speedup = baseline median / candidate median with a 95% bootstrap interval that "
        "includes the spread between processes running the same code.",
        "- **Roofline**: a median below max(bytes / peak bandwidth, flops / peak rate) is rejected as "
        "implausible"
        + ("." if has_floor else f"; no floor is known for {rd.cell(rd.device_label(results))}, hence n/a."),
        "",
        "| operator | candidates tried | rejected | top rejection reasons | skipped transformations |",
        "| --- | ---: | ---: | --- | ---: |",
    ]
    for p in ps:
        tried, rejected, checks = rd.attempt_counts(p)
        top = ", ".join(f"{rd.cell(name, 60)} ×{n}" for name, n in checks.most_common(3)) or rd.MISSING
        lines.append(f"| {rd.cell(p.problem)} | {tried} | {rejected} | {top} | {len(p.skipped)} |")
    return "\n".join(lines)


def environment_table(results: Results) -> str:
    env = rd.environment(results)
    clocks = ", ".join(f"{k}={v}" for k, v in (env.clocks if env else {}).items())
    values = ([env.device_name, env.driver, env.cuda, env.torch, env.triton, env.python] if env else [None] * 6) + [
        clocks
    ]
    return (
        "| device | driver | CUDA | torch | triton | python | clocks |\n"
        "| --- | --- | --- | --- | --- | --- | --- |\n"
        "| " + " | ".join(rd.cell(v, 300) for v in values) + " |"
    )


def footer(where: str = "pull request", label: str = "optimize-kernel") -> str:
    own = (
        "Opened by kernel-bot; close this pull request to discard the result."
        if where == "pull request"
        else "Posted by kernel-bot; this comment is updated in place on every run."
    )
    return (
        f"---\n<sub>{own} Add the `{label}` label to a pull request to optimise the operators "
        "it touches; push to that pull request to run again. Locally: "
        "`bot verify PROBLEM CANDIDATE`, `bot bench PROBLEM CANDIDATE...`, "
        "`bot optimize PROBLEM --device cpu`.</sub>"
    )


def _cap(text: str, limit: int, tail: str, note: str) -> str:
    """`text` + `tail` within `limit` characters, cut at a line boundary with `note` when needed."""
    if len(text) + len(tail) <= limit:
        return text + tail
    room = max(0, limit - len(tail) - len(note) - 2)
    return text[:room].rsplit("\n", 1)[0] + "\n\n" + note + tail


def render_pr_body(results: Results, reproduce_command: str, chart_path: str | None, notes: Sequence[str] = ()) -> str:
    """The follow-up pull request's description."""
    better = rd.improved(results)
    names = ", ".join(rd.cell(p.problem) for p in better)
    heading = f"verified faster kernels for {names}" if better else "no significant improvement"
    parts = [f"## kernel-bot: {heading}", summary_line(results)]
    if chart_path:
        parts.append(f"![speedups]({chart_path})")
    parts += ["### Results", results_table(results)]
    if notes:
        parts += ["### Notes", "\n".join(f"- {n}" for n in notes)]
    parts += [
        "### How it was verified",
        verification(results),
        "### Environment",
        environment_table(results),
        "### Reproduce",
        rd.fence(reproduce_command, "sh"),
    ]
    tail = f"\n\n{footer()}\n{REPORT_MARKER}\n"
    return _cap(
        "\n\n".join(parts),
        GITHUB_BODY_MAX_CHARS,
        tail,
        "_(truncated to fit GitHub's limit; the job summary has the full report)_",
    )


def render_comment(results: Results, patch: str | None, pr_url: str | None, notes: Sequence[str] = ()) -> str:
    """The sticky comment on the triggering PR; for forks it carries the patch itself."""
    parts = [STICKY_MARKER, "### kernel-bot results", summary_line(results), results_table(results)]
    if notes:
        parts.append("\n".join(f"- {n}" for n in notes))
    if pr_url:
        parts.append(f"Follow-up pull request with the faster kernels: {pr_url}")
    tail = "\n\n" + footer("comment") + "\n"
    head = "\n\n".join(parts)
    if patch:
        intro = (
            "This pull request comes from a fork, so kernel-bot cannot push a branch. "
            "Save the patch below as `kernel-bot.patch` and run `git apply kernel-bot.patch`."
        )
        room = GITHUB_BODY_MAX_CHARS - len(head) - len(intro) - len(tail) - 400
        lines = patch.splitlines(keepends=True)
        shown = _fit_lines(lines, room)
        body = rd.fence("".join(shown), "diff")
        if len(shown) < len(lines):
            body += (
                f"\n\n_The patch is truncated ({len(shown)} of {len(lines)} lines shown, to stay "
                "under GitHub's 65,536-character comment limit) and will not apply as shown; "
                "the complete patch is in this run's `kernel-bot-results` artifact._"
            )
        head += f"\n\n{intro}\n\n{body}"
    return _cap(head, GITHUB_BODY_MAX_CHARS, tail, "_(truncated to fit GitHub's comment limit)_")


def _fit_lines(lines: list[str], room: int) -> list[str]:
    used, kept = 0, []
    for line in lines:
        used += len(line)
        if used > room:
            break
        kept.append(line)
    return kept


def attempts_table(problem: ProblemResult) -> str:
    """Every candidate of one problem with its verdict: the step summary's detail."""
    lines = [
        "| round | candidate | origin | verdict | speedup [95% CI] | median µs | reason |",
        "| ---: | --- | --- | --- | ---: | ---: | --- |",
    ]
    ranked = sorted(problem.attempts, key=lambda a: -(a.speedup or 0.0))
    threshold = f"{rd.fmt_ratio(problem.min_speedup or 1.0)}x"
    for a in ranked:
        origin = (a.origin.detail or a.origin.strategy) if a.origin else None
        if not a.accepted:
            reason = a.reason or "; ".join(rd.rejection_reasons(a))
        elif a.not_timed or problem.not_timed:
            reason = f"correct; not timed: {rd.cell(a.not_timed or problem.not_timed)}"
        elif not rd.plausible(problem, a):
            reason = f"{FLAG} (not claimed)"
        elif a.slower_shapes:
            reason = "significantly slower on " + ", ".join(rd.cell(s, 40) for s in a.slower_shapes)
        elif a.speedup_ci:
            reason = f"interval {'clears' if a.significant else 'does not clear'} {threshold}"
        else:
            reason = "verified, not timed against the baseline"
        lines.append(
            f"| {rd.MISSING if a.round is None else a.round} | {rd.cell(a.name, 80)} "
            f"| {rd.cell(origin, 80)} | {rd.cell(a.status)} "
            f"| {rd.fmt_speedup(*_shown(problem, a))} "
            f"| {rd.fmt_us(a.median_us)} | {rd.cell(reason, 300)} |"
        )
    for s in problem.skipped:
        lines.append(
            f"| {rd.MISSING} | {rd.cell(s.transformation, 80)} | {rd.MISSING} | skipped "
            f"| {rd.MISSING} | {rd.MISSING} | {rd.cell(s.reason, 300)} |"
        )
    return "\n".join(lines)


def _shown(problem: ProblemResult, attempt: ContenderResult) -> tuple[Any, Any]:
    """An attempt's (speedup, interval) as a report may show them: none for a simulator's timing."""
    if attempt.not_timed or problem.not_timed:
        return None, None
    return attempt.speedup, attempt.speedup_ci


def _seconds(value: float | None) -> str:
    return rd.MISSING if value is None else f"{value:.0f} s"


def render_step_summary(results: Results) -> str:
    """The job summary: the PR table plus every attempt of every problem, under 1 MiB."""
    parts = ["## kernel-bot", summary_line(results), results_table(results)]
    total = run_line(p.time_split for p in rd.problems(results))
    if total is not None:
        parts.append(total[0].upper() + total[1:] + ".")
    for p in rd.problems(results):
        if rd.failed_problem(p):  # listed with its error above; nothing was measured
            continue
        baseline = p.baseline
        base_us = rd.median_us(baseline.shapes[0] if baseline and baseline.shapes else None)
        parts.append(
            f"### {rd.cell(p.problem)}\nbaseline `{rd.cell(baseline.name if baseline else None)}` "
            f"{rd.fmt_us(base_us)} µs; stopped: {rd.cell(p.stopped)}; "
            f"{p.time_split.line() if p.time_split else _seconds(p.wall_s)}\n\n{attempts_table(p)}"
        )
    parts += ["### How it was verified", verification(results), "### Environment", environment_table(results)]
    text = "\n\n".join(parts) + "\n"
    data = text.encode()
    if len(data) <= STEP_SUMMARY_MAX_BYTES:
        return text
    note = "\n\n_(truncated: the job summary is limited to 1 MiB; results.json has everything)_\n"
    cut = data[: STEP_SUMMARY_MAX_BYTES - len(note.encode()) - 4].decode("utf-8", "ignore")
    return cut.rsplit("\n", 1)[0] + note
