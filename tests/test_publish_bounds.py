"""`bot publish` against the GitHub double, second round: bounds from the default branch, text
inert to the last key and character, bounded cost, TARGETs judged from the git tree."""

from __future__ import annotations

import copy
import hashlib
import json
import time
import unicodedata
from dataclasses import replace

import pytest
from github_double.records import CommentRecord, Identity, now
from github_double.server import SECONDARY_RATE_LIMIT
from github_double.session import SleepRecorder, client_for, fast_retry
from stage_two_artifacts import FAST_SOURCE, KERNEL_SOURCE, PROBLEM_SOURCE, copied_candidates, honest_results
from test_publish_attacks import (
    REPO,
    _declaring,
    double,
    publish,
    refused,
    root,
    run_event,
    same_repo_pr,
    snapshot,
    writes,
)

from bot.core.errors import BotError
from bot.core.results import Results
from bot.core.results_schema import MAX_VALUES
from bot.core.safe_text import inert_results
from bot.github.client import STICKY_MARKER
from bot.github.rederive import cost_of, rederive
from bot.github.rederive_cost import MAX_UNITS, Cost
from bot.github.stage_two import publish_stage_two
from bot.github.untrusted import MAX_RESULTS_BYTES, load_results

__all__ = ["double", "root"]  # the fixtures, shared with test_publish_attacks


def _refused_on(double, tmp_path, root, pr, sha: str, results: dict, message: str) -> None:
    """`refused`, for a run of pull request `pr` at `sha`."""
    refused(double, tmp_path, root, results, run_event(sha, pr.head_ref, (pr.number,)), message)


def _texts(double) -> str:
    follow = [p for p in double.repo.pulls.values() if p.head_ref.startswith("kernel-bot/")]
    return "\n".join(
        [
            *(f"{p.title}\n{p.body}" for p in follow),
            *(c.body for c in double.repo.comments.values()),
            *(str(r.output.get(k) or "") for r in double.repo.check_runs.values() for k in ("title", "summary")),
        ]
    )


def _published_no_claim(double, tmp_path, root, pr, sha: str, results: dict):
    """Publish `results` for pull request `pr` at `sha`; assert no follow-up was made and the
    check run says no improvement; the sticky comment."""
    publish(double, tmp_path, root, results, run_event(sha, pr.head_ref, (pr.number,)))
    assert not [p for p in double.repo.pulls.values() if p.head_ref.startswith("kernel-bot/")]
    assert double.repo.branch_sha(f"kernel-bot/pr-{pr.number}") is None
    (run,) = double.repo.check_runs.values()
    assert (run.conclusion, run.output["title"]) == ("neutral", "no significant improvement")
    (comment,) = double.repo.comments.values()
    return comment


# -- bounds: the default branch's, never the artifact's ------------------------------------


def test_a_499x_claim_with_the_artifacts_own_bound_is_flagged_not_published(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    results = honest_results(speedup_factor=499.55)
    results["problems"][0]["max_plausible_speedup"] = 1e6  # a compromised stage 1 raises its own bar
    comment = _published_no_claim(double, tmp_path, root, pr, sha, results)
    best = results["problems"][0]["best"]
    low, high = best["speedup_ci"]
    shape = best["shapes"][0]
    cand_us, ratio = shape["measurement"]["median_us"], shape["speedup"]
    assert (
        f"- **rmsnorm**: implausible; check the baseline: `fast-rmsnorm` measured {best['speedup']:.2f}x "
        f"[{low:.2f}, {high:.2f}]: default: {ratio:,.1f}x is above the 100x bound "
        f"(baseline {cand_us * ratio:.4g} us, candidate {cand_us:.4g} us). Not claimed."
    ) in comment.body
    assert "499.55x faster" not in _texts(double)


def test_the_trusted_plausibility_bound_decides(double, tmp_path, root):
    (root / "pyproject.toml").write_text("[tool.kernel-bot]\nmin-speedup = 1.05\nmax-plausible-speedup = 1.5\n")
    pr, sha = same_repo_pr(double)
    publish(double, tmp_path, root, honest_results(), run_event(sha, pr.head_ref, (pr.number,)))
    assert not [p for p in double.repo.pulls.values() if p.head_ref.startswith("kernel-bot/")]
    (comment,) = double.repo.comments.values()
    assert "is above the 1.5x bound" in comment.body and "Not claimed." in comment.body


def test_the_outcome_word_is_stage_ones_rule_on_what_survives_not_the_artifacts():
    honest = Results.from_json(honest_results(2.0, slower_attempts=1))
    assert honest.problems[0].outcome == "improved"
    # A bar the 2x interval does not clear: no best, and no flag, so no improvement.
    (raised,) = rederive(honest, 3.0).problems
    assert raised.best is None and raised.outcome == "no significant improvement"
    # A plausibility bound under 2x flags the 2x attempt (not the 1.33x): implausible, as stage 1 says.
    (flagged,) = rederive(honest, 1.05, 1.5).problems
    assert flagged.best is None and flagged.outcome == "implausible"
    assert [f.name for f in flagged.implausible] == ["fast-rmsnorm"]
    # An artifact that names no best but says "improved" is read by the same rule.
    forged = replace(honest, problems=(replace(honest.problems[0], best=None),))
    assert rederive(forged, 1.05).problems[0].outcome == "no significant improvement"


def _every_shape(results: dict):
    p = results["problems"][0]
    return [s for c in (p["baseline"], *p["attempts"], p["best"]) for s in c["shapes"]]


def test_a_speedup_on_a_gpu_of_known_peaks_without_its_byte_count_is_inconsistent(double, tmp_path, root):
    """The floor a claim is held against is computed with stage 2's peaks: an artifact that
    leaves out the counts (or the floor) cannot leave out the check."""
    pr, sha = same_repo_pr(double)
    results = honest_results()
    for shape in _every_shape(results):
        shape.pop("nbytes")
        shape["floor_us"] = None
    with pytest.raises(BotError) as err:
        publish(double, tmp_path, root, results, run_event(sha, pr.head_ref, (pr.number,)))
    assert str(err.value) == (
        "nothing published: the results artifact is inconsistent (results.problems[0].attempts[0].shapes[0]: "
        "a speedup on NVIDIA H100 80GB HBM3 without the byte count its roofline floor is computed from "
        "(nbytes: a stage 1 older than this stage 2 writes none))"
    )
    assert writes(double) == ["checks/create"] and not double.repo.comments
    assert double.repo.branch_sha(f"kernel-bot/pr-{pr.number}") is None


def test_a_floor_from_peaks_other_than_stage_twos_is_inconsistent(double, tmp_path, root):
    """A stage 1 whose peak table was raised (pull-request code runs there) writes lower floors."""
    pr, sha = same_repo_pr(double)
    results = honest_results()
    trusted = _every_shape(results)[0]["floor_us"]
    for shape in _every_shape(results):
        shape["floor_us"] = trusted / 100
    with pytest.raises(BotError) as err:
        publish(double, tmp_path, root, results, run_event(sha, pr.head_ref, (pr.number,)))
    assert str(err.value) == (
        "nothing published: the results artifact is inconsistent (results.problems[0].baseline.shapes[0].floor_us "
        f"is {trusted / 100!r}, its byte and flop counts on NVIDIA H100 80GB HBM3 give {trusted!r})"
    )
    assert writes(double) == ["checks/create"]


def test_a_candidate_under_stage_twos_roofline_floor_is_flagged_not_claimed(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    results = honest_results()
    nbytes = int(3.35e12 * 60e-6)  # 60 us at the H100's 3.35 TB/s: the 2x candidate's 50 us is under it
    for shape in _every_shape(results):
        shape.update(nbytes=nbytes, floor_us=nbytes / 3.35e12 * 1e6)
    comment = _published_no_claim(double, tmp_path, root, pr, sha, results)
    assert "implausible; check the baseline" in comment.body and "is below the roofline floor of 60 us" in comment.body


@pytest.mark.parametrize("policy", ["kernelbench", None])
def test_a_claim_verified_under_another_tolerance_policy_is_refused(double, tmp_path, root, policy):
    """Which outputs count as correct is stage 2's policy (`strict` unless its own command line
    says otherwise), as min-speedup and the plausibility bound are: the artifact's word on the
    rule it was judged by decides nothing."""
    pr, sha = same_repo_pr(double)
    results = honest_results()
    if policy is None:  # unstated: a document of an older stage 1 has no such field
        del results["problems"][0]["tolerance"]
    else:
        results["problems"][0]["tolerance"] = policy
    message = (
        f"rmsnorm: its candidates were verified under the {policy or 'unstated'!s} tolerance policy, not "
        "stage 2's strict one; nothing is published"
    )
    _refused_on(double, tmp_path, root, pr, sha, results, message)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("level", 0.5, "results.problems[0].attempts[0].shapes[0].level is 0.5: stage 2 judges claims at 0.95"),
        (
            "resamples",
            100,
            "results.problems[0].attempts[0].shapes[0].derivation.resamples is 100: stage 2 re-derives with 2000",
        ),
    ],
)
def test_a_narrower_level_or_fewer_resamples_are_inconsistent(double, tmp_path, root, field, value, message):
    pr, sha = same_repo_pr(double)
    results = honest_results()
    shape = results["problems"][0]["attempts"][0]["shapes"][0]
    (shape["derivation"] if field == "resamples" else shape)[field] = value
    with pytest.raises(BotError) as err:
        publish(double, tmp_path, root, results, run_event(sha, pr.head_ref, (pr.number,)))
    assert str(err.value) == f"nothing published: the results artifact is inconsistent ({message})"
    assert writes(double) == ["checks/create"]


# -- text: inert, keys and invisible characters included; the chart plain ------------------

INVISIBLE = "\U000e0001\U000e0043\U000e006c\U000e007f\u061c\u2060\ufeff\u00ad\u202e\u2066\u2069\u200e\u200f\u200b"
KEY = "[docs](https://evil.example) ![x](https://evil.example/p.png) Closes #3 @octocat"


def test_clock_keys_and_invisible_characters_reach_nothing(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    results = honest_results()
    p = results["problems"][0]
    p["environment"]["clocks"] = {KEY: "1980 MHz", f"sm{INVISIBLE}": f"1{INVISIBLE}"}
    for c in (p["best"], p["attempts"][0]):
        c["name"] = f"fast{INVISIBLE}-rmsnorm"
    publish(double, tmp_path, root, results, run_event(sha, pr.head_ref, (pr.number,)))
    shown = _texts(double)
    assert "fast-rmsnorm" in shown and "docs" in shown  # the text is there, only inert
    for bad in ("](https://evil", "![x]", "https://evil", "Closes #3", "#3", "@octocat"):
        assert bad not in shown, bad
    assert not [f"U+{ord(c):04X}" for c in shown if unicodedata.category(c) == "Cf"]


IGNORABLE = "\ufe0f\U000e0100\u034f\u3164"  # variation selectors, grapheme joiner, Hangul filler
SHORT = "![x](http://e.x/p.png) @a #3"  # for fields of at most 40 characters


def _hostile_everywhere(results: dict) -> dict:
    """Every free-text field and every key of every free-form map of the artifact set to KEY
    (the fields the schema leaves open, whether or not a renderer shows them today)."""
    p = results["problems"][0]
    env = p["environment"]
    env.update(torch=KEY, triton=KEY, cuda=KEY, driver=KEY, python=KEY, containment=KEY)
    env["clocks"] = {KEY: {KEY: [KEY, 1]}, f"sm{IGNORABLE}": KEY}
    p.update(stopped=KEY, problem_path=KEY, llm={KEY: {KEY: KEY}}, skipped=[{"transformation": KEY, "reason": KEY}])
    p.update(skipped_distributions={"zeros": KEY}, implausible=[{"name": KEY, "evidence": KEY}])
    results.update(created=SHORT)
    results["trigger"].update(labels=[KEY], label=KEY, action=KEY)
    contenders = [p["baseline"], *p["attempts"], p["best"]]
    for c in contenders:
        for shape in c["shapes"]:
            shape.update(shape=f"{KEY}{IGNORABLE}", inputs=KEY, output_dtype=KEY)
        c["origin"].update(detail=KEY, model=KEY)
        c["path"] = KEY
    for c in contenders[:-1]:
        c.update(reasons=[KEY], checks=[{"name": KEY, "passed": True, "evidence": KEY, "details": {KEY: {KEY: KEY}}}])
    for c in (p["attempts"][0], p["best"]):
        c["name"] = f"fast{IGNORABLE}{KEY}"
    p["attempts"][0]["reason"] = KEY
    return results


def test_every_free_text_field_and_map_key_is_inert_wherever_it_is_shown(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    publish(double, tmp_path, root, _hostile_everywhere(honest_results()), run_event(sha, pr.head_ref, (pr.number,)))
    (follow,) = [p for p in double.repo.pulls.values() if p.head_ref.startswith("kernel-bot/")]
    shown = _texts(double)
    assert "docs" in shown and "octocat" in shown  # the text is there, only inert
    for bad in ("](https://evil", "![x]", "https://evil", "http://e.x", "Closes #3", "#3", "@octocat", "@a #"):
        assert bad not in shown, bad
    hidden = [f"U+{ord(c):04X}" for c in shown if unicodedata.category(c) == "Cf" or c in IGNORABLE]
    assert not hidden, hidden
    chart = double.git.git("show", f"{double.repo.branch_sha(follow.head_ref)}:docs/kernel-bot/speedups.png")
    assert chart.startswith(b"\x89PNG")


TROJAN = FAST_SOURCE.replace("return x  # fast", "return x  # fast \u202e\u2066 if admin: \u2069\u2066")


@pytest.mark.parametrize("fork", [False, True])
def test_a_candidate_source_with_bidi_or_invisible_characters_is_refused(double, tmp_path, root, fork):
    """The source is written verbatim (a follow-up's file, a fork's patch in the comment), so it
    is never made inert: one that holds what a reader cannot see (Trojan Source) is not shown."""
    if fork:
        pr = double.repo.open_pull_request(
            "main", {"kernels/rmsnorm.py": b"# fork\n" + KERNEL_SOURCE.encode()}, fork="attacker/octo-repo"
        )
        event = run_event(double.repo.head_sha(pr), "main", (), "attacker/octo-repo")
    else:
        pr, sha = same_repo_pr(double)
        event = run_event(sha, pr.head_ref, (pr.number,))
    results = honest_results()
    digest = hashlib.sha256(TROJAN.encode()).hexdigest()
    p = results["problems"][0]
    p["best"].update(source=TROJAN, source_sha256=digest)
    p["attempts"][0]["source_sha256"] = digest
    message = (
        "rmsnorm: the best candidate's source holds characters a reader cannot see (U+202E on line 5), "
        "which can make it show one program and run another; nothing is published"
    )
    refused(double, tmp_path, root, results, event, message)


def test_nested_mathtext_in_a_chart_label_is_drawn_as_text(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    results = honest_results()
    results["problems"][0]["not_timed"] = "$" + "a^{" * 70 + "b" + "}" * 70 + "$"  # RecursionError in mathtext
    publish(double, tmp_path, root, results, run_event(sha, pr.head_ref, (pr.number,)))
    (comment,) = double.repo.comments.values()
    assert "a^{a^{" in comment.body


def test_nested_mathtext_in_a_claimed_shapes_label_is_committed_as_a_plain_text_chart(double, tmp_path, root):
    from bot.report.chart import _order, speedup_figure
    from bot.report.data import chart_bars

    pr, sha = same_repo_pr(double)
    results = honest_results()
    label = "$" + "a^{" * 70 + "b" + "}" * 70 + "$"  # RecursionError in mathtext's parser
    p = results["problems"][0]
    for c in (p["baseline"], *p["attempts"], p["best"]):
        c["shapes"][0]["shape"] = label
    publish(double, tmp_path, root, results, run_event(sha, pr.head_ref, (pr.number,)))
    (follow,) = [x for x in double.repo.pulls.values() if x.head_ref.startswith("kernel-bot/")]
    chart = double.git.git("show", f"{double.repo.branch_sha(follow.head_ref)}:docs/kernel-bot/speedups.png")
    assert chart.startswith(b"\x89PNG")
    fig = speedup_figure(_order(chart_bars(Results.from_json(results))), "title $x^{2}$")
    texts = fig.findobj(lambda a: hasattr(a, "get_parse_math"))
    assert texts and not [t for t in texts if t.get_parse_math()]
    assert any(t.get_text().startswith("rmsnorm · $a^{a^{") for t in texts)


# -- bounded cost ----------------------------------------------------------------------------


def _inflated(batches: int, per_batch: int, copies: int) -> dict:
    """An honest artifact of `copies` candidates whose measurements are swapped for bigger ones:
    refused by cost before any number is compared, so its claims need not fit."""
    results = copied_candidates(copies)
    big = {
        "samples_us": [100.0 + (i % 7) for i in range(batches * per_batch)],
        "batch_sizes": [per_batch] * batches,
        "batch_workers": [b % 2 for b in range(batches)],
    }
    for c in results["problems"][0]["attempts"] + [results["problems"][0]["best"]]:
        c["shapes"][0]["measurement"].update(big)
        c["shapes"][0]["derivation"]["baseline"] = dict(big)
    return results


def _cost(results: dict) -> Cost:
    return cost_of(Results.from_json(results))


@pytest.mark.parametrize(
    "batches,per_batch,copies,why",
    [
        (
            1_000,
            10,
            3,
            "re-deriving its {n} speedups would take {units} million bootstrap steps, over the cap of 250 million "
            "(fewer samples or batches per measurement)",
        ),
        (
            2_000,
            10,
            1,
            "one of its speedups would take {largest} million bootstrap steps to re-derive, over the cap of "
            "120 million for one (fewer samples or batches per measurement)",
        ),
    ],
)
def test_an_artifact_over_the_re_derivation_cap_is_refused_before_any_bootstrap(
    double, tmp_path, root, batches, per_batch, copies, why
):
    pr, sha = same_repo_pr(double)
    results = _inflated(batches, per_batch, copies)
    cost = _cost(results)
    why = why.format(n=cost.speedups, units=round(cost.units / 1e6), largest=round(cost.largest_units / 1e6))
    start = time.process_time()
    _refused_on(double, tmp_path, root, pr, sha, results, f"untrusted results rejected: {why}; nothing is published")
    assert time.process_time() - start < 30  # parsing and validating 0.5 MB; no bootstrap ran


def _costliest(batches: int, per_batch: int) -> dict:
    """Honest candidates of `batches` x `per_batch` samples, copied as many times as the caps on
    bootstrap steps, values and bytes admit."""
    one, two = copied_candidates(1, batches, per_batch), copied_candidates(2, batches, per_batch)
    copies = 1 + (MAX_UNITS - _cost(one).units) // (_cost(two).units - _cost(one).units)
    copies = min(copies, (MAX_VALUES - 2_000) // (3 * batches * per_batch))  # samples twice, batches
    size = len(json.dumps(one))
    copies = min(copies, 1 + (MAX_RESULTS_BYTES - size) // (len(json.dumps(two)) - size))
    return copied_candidates(copies, batches, per_batch)


@pytest.mark.parametrize("batches,per_batch", [(100, 10), (8, 5), (40, 25), (20, 1_000)])
def test_the_costliest_admitted_artifacts_are_read_and_re_derived_within_10_s(tmp_path, batches, per_batch):
    """From the file to every number re-derived, in one process: what stage 2 does before the
    first claim can be found wrong (docs/security.md has the figures)."""
    results = _costliest(batches, per_batch)
    (tmp_path / "results.json").write_text(json.dumps(results))
    start = time.monotonic()
    admitted = inert_results(load_results(tmp_path, lambda _: True))
    derived = rederive(admitted, 1.05)
    elapsed = time.monotonic() - start
    print(f"{len(results['problems'][0]['attempts'])} candidates of {batches}x{per_batch}: {elapsed:.2f} s")
    assert derived.problems[0].best is not None
    assert elapsed < 10, elapsed


def test_one_copy_more_than_the_cap_admits_is_refused():
    copies = len(_costliest(100, 10)["problems"][0]["attempts"])
    with pytest.raises(BotError, match="over the cap of 250 million"):
        rederive(Results.from_json(copied_candidates(copies + 1, 100, 10)), 1.05)


def _sample_heavy(batches: int, per_batch: int) -> dict:
    """An artifact as close to the 4 MiB size cap as it gets, of attempts whose measurements (and
    derivation baselines) are one- and two-digit samples: about two million values, each a few
    bytes of JSON and as much work as any other to read. Their claims do not fit their samples."""
    results = copied_candidates(1)
    problem = results["problems"][0]
    template = problem["attempts"][0]
    samples = [1 + i % 17 for i in range(batches * per_batch)]
    workers = [b % 2 for b in range(batches)]
    big = {"samples_us": samples, "batch_sizes": [per_batch] * batches, "batch_workers": workers}
    measurement = template["shapes"][0]["measurement"]
    for key in ("iqr_us", "q1_us", "q3_us", "n", "rel_se", "batches", "workers", "worker_medians_us"):
        measurement.pop(key, None)
    measurement.update(big, median_us=float(sorted(samples)[len(samples) // 2]))
    template["shapes"][0]["derivation"]["baseline"] = big
    problem["attempts"] = []
    one = len(json.dumps(template)) + 2
    room = MAX_RESULTS_BYTES - len(json.dumps(results))
    problem["attempts"] = [{**template, "name": f"copy-{k}"} for k in range(room // one - 1)]
    return results


@pytest.mark.parametrize("batches,per_batch", [(2, 10_000), (20, 1_000), (2_000, 10)])
def test_an_artifact_of_small_samples_under_the_size_cap_is_refused_within_seconds(
    double, tmp_path, root, batches, per_batch
):
    pr, sha = same_repo_pr(double)
    results = _sample_heavy(batches, per_batch)
    assert len(json.dumps(results)) <= MAX_RESULTS_BYTES
    start = time.monotonic()
    with pytest.raises(BotError) as err:
        publish(double, tmp_path, root, results, run_event(sha, pr.head_ref, (pr.number,)))
    elapsed = time.monotonic() - start
    print(f"refused {batches}x{per_batch} in {elapsed:.1f} s: {err.value}")
    assert str(err.value) == (
        "untrusted results rejected: results: more than 500,000 values (fewer samples, shapes or candidates)"
    )
    assert writes(double) == []
    assert elapsed < 10, elapsed


def test_retry_after_600_fails_clearly_without_waiting(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    sleep = SleepRecorder()
    double.fail_next(replace(SECONDARY_RATE_LIMIT, headers={"Retry-After": "600"}), methods=("POST",))
    art = tmp_path / "artifact"
    art.mkdir()
    (art / "results.json").write_text(json.dumps(honest_results()))
    (tmp_path / "event.json").write_text(json.dumps(run_event(sha, pr.head_ref, (pr.number,))))
    environ = {
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_EVENT_NAME": "workflow_run",
        "GITHUB_TOKEN": "test-token",
        "GITHUB_EVENT_PATH": str(tmp_path / "event.json"),
        "GITHUB_API_URL": double.url,
    }
    before = snapshot(double)
    with pytest.raises(BotError) as err:
        publish_stage_two(art, root, lambda _: None, environ, client=client_for(double, retry=fast_retry(sleep=sleep)))
    assert str(err.value) == (
        "kernel-bot stopped retrying to push commits: GitHub asked to wait 600 s (Retry-After), over the 60 s "
        "kernel-bot waits at once; nothing more is sent, run the publish job again later"
    )
    assert sleep.delays == []
    assert snapshot(double) == before  # no branch, pull request, comment or check run
    assert double.repo.branch_sha(f"kernel-bot/pr-{pr.number}") is None and not double.repo.comments


def test_retry_after_waits_stop_at_the_total_cap(double):
    from github_double.session import sample_plan

    source = double.repo.open_pull_request("feature/x", {"kernels/softmax.py": b"# softmax\n"})
    sleep = SleepRecorder()
    double.fail_next(replace(SECONDARY_RATE_LIMIT, headers={"Retry-After": "50"}), times=10, methods=("POST",))
    with pytest.raises(BotError) as err:
        client_for(double, retry=fast_retry(sleep=sleep, max_total_wait_s=120.0)).publish(
            sample_plan(source.number, source.head_ref, measured_sha=double.repo.branch_sha(source.head_ref)),
            max_open=3,
        )
    assert sleep.delays == [50.0, 50.0]
    assert str(err.value) == (
        "kernel-bot stopped retrying to push commits: 150 s of waits in all would pass the 120 s "
        "kernel-bot allows one publish; nothing more is sent, run the publish job again later"
    )


def test_another_apps_comment_with_the_marker_is_left_alone(double, tmp_path, root):
    pr, sha = same_repo_pr(double)
    stamp = now()
    foreign = f"{STICKY_MARKER}\nanother app's report"
    double.repo.comments[900] = CommentRecord(
        900, pr.number, foreign, Identity("other-app[bot]", 1_234, kind="Bot"), stamp, stamp
    )
    publish(double, tmp_path, root, honest_results(), run_event(sha, pr.head_ref, (pr.number,)))
    publish(double, tmp_path, root, honest_results(), run_event(sha, pr.head_ref, (pr.number,)))
    assert double.repo.comments[900].body == foreign
    ours = [c for c in double.repo.comments.values() if c.author.login == "github-actions[bot]"]
    assert len(ours) == 1 and "kernel-bot results" in ours[0].body
    edited = [e.path for e in double.exchanges if e.operation_id == "issues/update-comment"]
    assert "/issues/comments/900" not in "".join(edited)


# -- scope: the git tree at the measured commit ----------------------------------------------


def _pr_with_entry(double, mode: str, kind: str, target: str = "kernels/rmsnorm.py"):
    """A pull request whose head has `target` as a tree entry of `mode` (a symlink, a submodule)."""
    pr, _ = same_repo_pr(double, {"problems/rmsnorm.py": _declaring(target)})
    git = double.git
    head = double.repo.head_sha(pr)
    pointee = git.write_blob(b"../problems/rmsnorm.py") if kind == "blob" else head
    tree = git.build_tree(git.read_commit(head).tree, [(target, mode, kind, pointee)])
    me = git.read_commit(head).author
    sha = git.commit_tree(tree, [head], "entry", me, me)
    git.update_ref(f"refs/heads/{pr.head_ref}", sha)
    return pr, sha


@pytest.mark.parametrize(
    "mode,kind,target,why",
    [
        ("120000", "blob", "kernels/rmsnorm.py", "is a symlink at {sha}, not a regular file"),
        ("160000", "commit", "kernels/rmsnorm.py", "is a submodule (gitlink) at {sha}, not a regular file"),
        ("120000", "blob", "kernels/sub", "has 'kernels/sub', which is a symlink at {sha}, not a regular file"),
    ],
)
def test_a_symlink_or_submodule_target_is_refused_from_the_tree(double, tmp_path, root, mode, kind, target, why):
    declared = target if target.endswith(".py") else f"{target}/rmsnorm.py"
    pr, sha = _pr_with_entry(double, mode, kind, target)
    if declared != target:  # the symlink is a folder on the way to the TARGET
        double.repo.commit_files(pr.head_ref, {"problems/rmsnorm.py": _declaring(declared)})
        sha = double.repo.head_sha(pr)
    message = f"rmsnorm: TARGET {declared!r} {why.format(sha=sha[:12])}; nothing is published"
    _refused_on(double, tmp_path, root, pr, sha, honest_results(target=declared), message)


@pytest.mark.parametrize(
    "target,why",
    [
        ("kernels/Conftest.py", "is not a kernel module (a .py file other than package and test plumbing)"),
        ("kernels/CONFTEST.PY", "is not a kernel module (a .py file other than package and test plumbing)"),
        ("kernels/__INIT__.py", "is not a kernel module (a .py file other than package and test plumbing)"),
        (
            "kernels/test_rmsnorm.py",
            "is a test module (test_*.py, *_test.py or under a tests/ folder), not a kernel module",
        ),
        (
            "kernels/rmsnorm_test.py",
            "is a test module (test_*.py, *_test.py or under a tests/ folder), not a kernel module",
        ),
        (
            "kernels/Tests/rmsnorm.py",
            "is a test module (test_*.py, *_test.py or under a tests/ folder), not a kernel module",
        ),
    ],
)
def test_case_variants_and_test_modules_are_refused(double, tmp_path, root, target, why):
    pr, sha = same_repo_pr(double, {"problems/rmsnorm.py": _declaring(target), target: b"x = 1\n"})
    message = f"rmsnorm: TARGET {target!r} {why}; nothing is published"
    _refused_on(double, tmp_path, root, pr, sha, honest_results(target=target), message)


def test_a_case_variant_of_the_problems_folder_is_refused(double, tmp_path, root):
    """On a case-insensitive checkout `kernels/Problems/rmsnorm.py` is the problem file itself."""
    (root / "pyproject.toml").write_text('[tool.kernel-bot]\nmin-speedup = 1.05\nproblems-dir = "kernels/problems"\n')
    target = "kernels/Problems/rmsnorm.py"
    problem = PROBLEM_SOURCE.replace('TARGET = "kernels/rmsnorm.py"', f"TARGET = {target!r}").encode()
    pr, sha = same_repo_pr(double, {"kernels/problems/rmsnorm.py": problem, target: b"x = 1\n"})
    message = (
        f"rmsnorm: TARGET {target!r} is under kernels/problems/, where the problems (the definition of "
        "correct) live; nothing is published"
    )
    _refused_on(double, tmp_path, root, pr, sha, honest_results(target=target), message)


def test_a_target_made_a_symlink_to_the_same_bytes_since_the_measurement_is_a_change(double, tmp_path, root):
    """The contents API serves a symlink's file as if it were the file: the base's TARGET is
    compared by its git tree entry, so a follow-up never turns the newer symlink back into a file."""
    measured = double.repo.branch_sha("main")
    git = double.git
    impl = git.write_blob(KERNEL_SOURCE.encode())
    link = git.write_blob(b"rmsnorm_impl.py")
    tree = git.build_tree(
        git.read_commit(measured).tree,
        [("kernels/rmsnorm_impl.py", "100644", "blob", impl), ("kernels/rmsnorm.py", "120000", "blob", link)],
    )
    me = git.read_commit(measured).author
    tip = git.commit_tree(tree, [measured], "Keep the kernel in rmsnorm_impl.py", me, me)
    git.update_ref("refs/heads/main", tip)
    nightly = copy.deepcopy(honest_results())
    nightly["trigger"].update(kind="schedule", repo=REPO, default_branch="main")
    refused(
        double,
        tmp_path,
        root,
        nightly,
        run_event(measured, "main", event="schedule"),
        f"main moved from {measured[:12]} (measured) to {tip[:12]}, and kernels/rmsnorm.py changed in between: "
        f"the numbers are of {measured[:12]}, so nothing is published (the next run measures {tip[:12]})",
    )


def test_an_executable_kernel_module_is_still_a_regular_file(double, tmp_path, root):
    pr, sha = _pr_with_entry(double, "100755", "blob")
    double.git.update_ref(f"refs/heads/{pr.head_ref}", sha)
    publish(double, tmp_path, root, honest_results(), run_event(sha, pr.head_ref, (pr.number,)))
    assert [p for p in double.repo.pulls.values() if p.head_ref == f"kernel-bot/pr-{pr.number}"]
