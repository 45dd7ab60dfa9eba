"""The result cache keeps verdicts, not luck: a conclusive outcome is reused, an inconclusive one,
one from another protocol or one a busy machine can decide is measured again; the cache lives
under XDG_CACHE_HOME in folders only its user may enter."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import CANDIDATES, PROBLEMS

from bot.core.conclusive import conclusion
from bot.core.domain import CandidateSource, CheckResult, Origin, Verdict
from bot.core.measurement import Measurement, Speedup
from bot.core.outcomes import ContenderOutcome, ShapeOutcome
from bot.core.settings import TimingMode
from bot.engine.evaluation.cache import ResultCache, code_hash, entry_document, environment_key, protocol_of
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.evaluation.options import EvalOptions, default_cache_root
from bot.engine.workspace.candidates import load_candidate
from bot.engine.workspace.problems import load_problem

MIN = 1.05
BASE = Measurement((100.0, 101.0, 99.0, 100.5) * 3, (4, 4, 4))


def _shape(name: str, ci: tuple[float, float], significance: str, n: int = 12) -> ShapeOutcome:
    ratio = (ci[0] * ci[1]) ** 0.5
    samples = tuple(100.0 / ratio * (1 + 0.01 * (k % 3)) for k in range(n))
    own = Measurement(samples, (n // 2, n - n // 2) if n >= 2 else ())
    return ShapeOutcome(
        name, "float32[64, 128]", "float32", own, Speedup(ratio, ci[0], ci[1], 0.95, significance, BASE), 1.0, 0.0, 0.0
    )


def _outcome(candidate: CandidateSource, *shapes: ShapeOutcome, checks=(), not_timed=None) -> ContenderOutcome:
    failed = any(not c.passed for c in checks)
    verdict = Verdict("rejected" if failed else "accepted", tuple(checks) or (CheckResult("values", True),))
    return ContenderOutcome(candidate, "candidate", verdict, shapes, not_timed)


def _candidate(name: str = "c") -> CandidateSource:
    return CandidateSource(name, f"class ModelNew: pass  # {name}\n", Origin("file"))


def noisy(c):  # the honest 7x, measured once under load
    return _outcome(c, _shape("main", (0.13, 136.0), "no significant difference"))


def faster(c):
    return _outcome(c, _shape("main", (6.5, 7.5), "faster"), _shape("wide", (6.0, 7.0), "faster"))


def not_faster(c):
    return _outcome(c, _shape("main", (0.97, 1.03), "no significant difference"))


# The rule


def test_an_interval_that_holds_min_speedup_is_inconclusive_one_on_either_side_is_not():
    c = _candidate()
    assert not conclusion(noisy(c), MIN).conclusive
    assert conclusion(faster(c), MIN).conclusive and "significantly faster" in conclusion(faster(c), MIN).why
    assert conclusion(not_faster(c), MIN).conclusive  # never claimed however often it is measured
    straddling = _outcome(c, _shape("main", (1.0, 1.2), "no significant difference"))
    assert not conclusion(straddling, MIN).conclusive
    # Over shapes, the geometric mean of the bounds decides, as selection reads it: sqrt(3.0 * 0.5)
    # = 1.22 clears the bar; sqrt(1.2 * 0.5) = 0.77 and sqrt(1.5 * 2.0) = 1.73 hold it.
    open_shape = _shape("wide", (0.5, 2.0), "no significant difference")
    assert conclusion(_outcome(c, _shape("main", (3.0, 3.3), "faster"), open_shape), MIN).conclusive
    assert not conclusion(_outcome(c, _shape("main", (1.2, 1.5), "faster"), open_shape), MIN).conclusive
    slower = _outcome(c, _shape("main", (3.0, 3.3), "faster"), _shape("wide", (0.5, 0.8), "slower"))
    assert conclusion(slower, MIN).conclusive and "slower on wide" in conclusion(slower, MIN).why
    one_call = _outcome(c, _shape("main", (6.5, 7.5), "no significant difference", n=1))
    assert not conclusion(one_call, MIN).conclusive


def test_a_rejection_is_kept_when_it_judged_the_code_and_judged_again_when_a_busy_machine_could_cause_it():
    c = _candidate()
    values = _outcome(c, checks=[CheckResult("values", False, "max abs err 3e-2 > 1e-5")])
    assert conclusion(values, MIN).conclusive
    for check in (
        CheckResult("hidden time", False, "25 ms per call unaccounted (clocks tampered with?)"),
        CheckResult("wall clock", False, "the parent's clock saw 3x the reported time"),
        CheckResult("start", False, "could not reach the worker"),
        CheckResult("call", False, "timed out after 60 s (killed; it kept using CPU: 60.1 s)"),
        CheckResult("call", False, "torch.OutOfMemoryError: CUDA out of memory"),
    ):
        assert not conclusion(_outcome(c, checks=[CheckResult("values", False), check]), MIN).conclusive, check
    simulated = _outcome(c, not_timed="runs under the Triton interpreter on this device")
    assert conclusion(simulated, MIN).conclusive


# The cache alone, with entries written by the typed objects


@pytest.fixture
def problem():
    return load_problem(PROBLEMS / "scale_add.py")


@pytest.fixture
def reference(problem):
    return CandidateSource("reference", problem.source, Origin("reference"), problem.path, "Model")


def _plant(cache: ResultCache, problem, baseline, outcome, protocol=None) -> Path:
    """An entry as a bot that cached every outcome wrote it."""
    path = cache.entry_path(problem, baseline, outcome.candidate)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry_document(problem, outcome, protocol or cache.protocol, MIN)))
    return path


def _cache(root: Path, options: EvalOptions) -> ResultCache:
    return ResultCache(root, "cpu|test-stack", protocol_of(options), options.min_speedup)


def test_a_conclusive_entry_comes_back_whole_a_noisy_one_and_one_of_another_protocol_do_not(
    problem, reference, tmp_path, quick_options
):
    options = quick_options(cache_root=tmp_path, use_cache=True)
    cache = _cache(tmp_path, options)
    a, b, c = _candidate("a"), _candidate("b"), _candidate("c")
    _plant(cache, problem, reference, faster(a))
    _plant(cache, problem, reference, noisy(b))
    other = protocol_of(replace(options, timing=replace(options.timing, replicas=3)))
    _plant(cache, problem, reference, faster(c), other)
    assert cache.get(problem, reference, a) == faster(a)
    assert cache.get(problem, reference, b) is None
    assert cache.get(problem, reference, c) is None
    # Under the other protocol, c's entry is a conclusion again.
    assert ResultCache(tmp_path, "cpu|test-stack", other, MIN).get(problem, reference, c) == faster(c)
    # A rejection on values is kept; put keeps conclusions only and drops the entry it replaces.
    rejected = _outcome(b, checks=[CheckResult("values", False, "max abs err 3e-2")])
    cache.put(problem, reference, rejected)
    assert cache.get(problem, reference, b) == rejected
    cache.put(problem, reference, noisy(b))
    assert not cache.entry_path(problem, reference, b).exists()


def test_an_entry_of_another_source_or_not_matching_the_schema_is_a_miss(problem, reference, tmp_path, quick_options):
    cache = _cache(tmp_path, quick_options())
    a = _candidate("a")
    path = _plant(cache, problem, reference, faster(a))
    moved = replace(a, source=a.source + "# edited\n")
    path.rename(cache.entry_path(problem, reference, moved))
    assert cache.get(problem, reference, moved) is None  # its source_sha256 is a's
    entry = entry_document(problem, faster(a), cache.protocol, MIN)
    entry["results"]["problems"][0]["attempts"][0]["shapes"][0]["speedup"] = -7.0
    path.write_text(json.dumps(entry))
    assert cache.get(problem, reference, a) is None


def test_an_entry_is_a_results_document_judged_by_the_one_rule(problem, quick_options):
    protocol = protocol_of(quick_options())
    claimed = entry_document(problem, faster(_candidate("a")), protocol, MIN)["results"]["problems"][0]
    assert claimed["outcome"] == "improved" and claimed["best"]["name"] == "a"
    inconclusive = entry_document(problem, noisy(_candidate("b")), protocol, MIN)["results"]["problems"][0]
    assert inconclusive["outcome"] == "no significant improvement" and inconclusive.get("best") is None


def test_the_protocol_holds_what_a_verdict_means_and_not_how_long_it_took(quick_options):
    options = quick_options()
    same = protocol_of(options)
    for how_long in (
        replace(options, timing=replace(options.timing, time_cap_s=9.0, min_samples=50)),
        replace(options, parallel=7, cache_root=Path("/elsewhere"), use_cache=True),
    ):
        assert protocol_of(how_long) == same
    for meaning in (
        replace(options, timing=replace(options.timing, mode=TimingMode.GRAPH)),
        replace(options, timing=replace(options.timing, replicas=3)),
        replace(options, timing=replace(options.timing, checks_per_batch=2)),
        replace(options, min_speedup=1.2),
        replace(options, trials_per_distribution=2),
    ):
        assert protocol_of(meaning).fingerprint != same.fingerprint, meaning
    assert replace(same, code="another version").fingerprint != same.fingerprint


def test_the_code_hash_follows_the_judging_code_and_nothing_else(tmp_path):
    for package, text in (("engine", "CHECK = 1\n"), ("harness", "x = 1\n"), ("report", "y = 1\n")):
        (tmp_path / package).mkdir()
        (tmp_path / package / "m.py").write_text(text)
    before = code_hash(tmp_path)
    (tmp_path / "report" / "m.py").write_text("y = 2\n")
    code_hash.cache_clear()
    assert code_hash(tmp_path) == before
    (tmp_path / "engine" / "m.py").write_text("CHECK = 2\n")
    code_hash.cache_clear()
    assert code_hash(tmp_path) != before


# Where it lives


def test_the_cache_root_honours_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_root() == tmp_path / "xdg" / "kernel-bot"
    assert EvalOptions(device="cpu", use_cache=True).cache_root == tmp_path / "xdg" / "kernel-bot"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for ignored in ("", "relative/cache"):  # the XDG specification: empty or relative is ignored
        monkeypatch.setenv("XDG_CACHE_HOME", ignored)
        assert default_cache_root() == tmp_path / "home" / ".cache" / "kernel-bot"


def test_the_cache_is_made_0700_tightened_where_it_is_ours_and_unused_where_it_is_not(
    problem, reference, tmp_path, quick_options
):
    options = quick_options()
    root = tmp_path / "made"
    _cache(root, options)
    assert (root.stat().st_mode & 0o777, (root / "results").stat().st_mode & 0o777) == (0o700, 0o700)
    loose = tmp_path / "loose"
    (loose / "results").mkdir(parents=True)
    os.chmod(loose, 0o755)
    os.chmod(loose / "results", 0o777)
    assert _cache(loose, options).folder is not None
    assert (loose / "results").stat().st_mode & 0o777 == 0o700
    (tmp_path / "a-file").write_text("")
    assert _cache(tmp_path / "a-file" / "kernel-bot", options).folder is None  # cannot be made: off, no error
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "results").symlink_to(loose / "results")
    assert _cache(linked, options).folder is None
    theirs = tmp_path / "theirs"
    (theirs / "results").mkdir(parents=True)
    if os.geteuid() == 0:
        os.chown(theirs / "results", 54321, 54321)
    else:
        pytest.skip("needs root to make a folder another user's")
    cache = _cache(theirs, options)
    assert cache.folder is None and cache.get(problem, reference, _candidate()) is None
    cache.put(problem, reference, faster(_candidate()))
    assert list((theirs / "results").iterdir()) == []


# Through evaluate, with real workers


def test_evaluate_reuses_a_conclusive_entry_and_measures_a_noisy_one_or_another_protocols_again(
    problem, reference, tmp_path, quick_options
):
    options = quick_options(cache_root=tmp_path, use_cache=True)
    cache = ResultCache(tmp_path, environment_key("cpu", None), protocol_of(options), MIN)
    honest = load_candidate(CANDIDATES / "honest.py")
    slow = load_candidate(CANDIDATES / "slow2x.py")
    cheat = load_candidate(CANDIDATES / "cheat_low_precision.py")
    kept = faster(honest)
    _plant(cache, problem, reference, kept)
    other = protocol_of(replace(options, min_speedup=1.2))
    planted_other = _plant(cache, problem, reference, faster(slow), other)
    planted_noisy = _plant(cache, problem, reference, noisy(cheat))  # an accepted, noisy entry
    said: list[str] = []
    got = evaluate(problem, [honest, slow, cheat], reference, options, progress=lambda event: said.append(event.line()))
    assert any("1 candidate(s) from the cache" in line for line in said), said
    assert got.candidates[0] == kept
    # Measured again: the cheat is rejected on its values now, slow2x timed against this baseline.
    assert not got.candidates[2].verdict.accepted and "values" in " ".join(got.candidates[2].verdict.reasons)
    assert (
        got.candidates[1].verdict.accepted
        and got.candidates[1].shapes[0].measurement != faster(slow).shapes[0].measurement
    )
    assert got.candidates[1].speedup != faster(slow).speedup
    for planted in (planted_other, planted_noisy):
        entry = json.loads(planted.read_text()) if planted.exists() else None
        assert entry is None or entry["protocol"] == cache.protocol.fingerprint
    assert json.loads(planted_noisy.read_text())["results"]["problems"][0]["attempts"][0]["status"] == "rejected"
