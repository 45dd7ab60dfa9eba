"""Stage 2 treats stage 1's results directory as untrusted data."""

from __future__ import annotations

import json

import pytest

from bot.errors import BotError
from bot.publish import trusted_trigger
from bot.untrusted import MAX_RESULTS_BYTES, load_results, validate_results

ALLOWED = lambda path: path.startswith("kernels/")  # noqa: E731


def _results(**problem) -> dict:
    base = {"problem": "rmsnorm", "target": "kernels/rmsnorm.py",
            "best": {"name": "tune", "source": "class ModelNew: pass\n", "speedup": 1.4,
                     "speedup_ci": [1.3, 1.5], "shapes": []},
            "attempts": [], "environment": {}}
    return {"schema_version": 1, "min_speedup": 1.05, "trigger": {"kind": "pull_request"},
            "problems": [{**base, **problem}]}


def test_valid_results_pass():
    assert validate_results(_results(), ALLOWED)["problems"][0]["problem"] == "rmsnorm"


@pytest.mark.parametrize("mutate,message", [
    (lambda r: r.update(schema_version=2), "schema_version"),
    (lambda r: r["problems"][0].update(target="../../.github/workflows/x.yml"), "not a plain repository-relative path"),
    (lambda r: r["problems"][0].update(target=".github/workflows/ci.yml"), "outside the configured kernel paths"),
    (lambda r: r["problems"][0].update(target="/etc/passwd"), "not a plain"),
    (lambda r: r["problems"][0].update(problem="../x"), "plain name"),
    (lambda r: r["problems"][0]["best"].update(source="x" * (600 << 10)), "source code of at most"),
    (lambda r: r["problems"][0]["best"].update(speedup="fast"), "finite number"),
    (lambda r: r["problems"][0]["best"].update(speedup_ci=[float("nan"), 2]), "finite number"),
    (lambda r: r.update(problems="all"), "expected a list"),
    (lambda r: r["problems"][0].update(outcome="failed", error={"html": "<b>"}), "error"),
    (lambda r: r["problems"][0].update(outcome="failed", error="x" * 30_000), "error"),
    (lambda r: r["problems"][0].update(distributions=["standard", "<img>"]), "distributions"),
    (lambda r: r["problems"][0].update(skipped_distributions={"zeros": 3}), "skipped_distributions.zeros"),
    (lambda r: r["problems"][0].update(skipped_distributions={"a b": "why"}), "not a plain name"),
    (lambda r: r["problems"][0].update(skipped_distributions=["zeros"]), "name -> reason"),
])
def test_forged_or_malformed_results_are_refused(mutate, message):
    data = _results()
    mutate(data)
    with pytest.raises(BotError) as err:
        validate_results(data, ALLOWED)
    assert message in str(err.value) and "untrusted results rejected" in str(err.value)


def test_size_cap_symlink_and_bad_json(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "results.json").write_bytes(b" " * (MAX_RESULTS_BYTES + 1))
    with pytest.raises(BotError, match="exceeds"):
        load_results(tmp_path / "a", ALLOWED)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "results.json").symlink_to("/etc/hostname")
    with pytest.raises(BotError, match="not a regular file"):
        load_results(tmp_path / "b", ALLOWED)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "results.json").write_text("{not json")
    with pytest.raises(BotError, match="not valid JSON"):
        load_results(tmp_path / "c", ALLOWED)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "results.json").write_text(json.dumps(_results()))
    assert load_results(tmp_path / "d", ALLOWED)["schema_version"] == 1


def test_the_workflow_run_event_decides_where_to_publish():
    event = {"workflow_run": {"event": "pull_request", "head_branch": "feature", "head_sha": "abc",
                              "head_repository": {"full_name": "o/r"},
                              "pull_requests": [{"number": 7, "base": {"ref": "main"}}]},
             "repository": {"default_branch": "main"}}
    claimed = {"kind": "pull_request", "pr_number": 99, "head_ref": "evil", "head_sha": "abc"}
    trigger = trusted_trigger("workflow_run", event, "o/r", claimed)
    assert trigger.pr_number == 7 and trigger.head_ref == "feature" and not trigger.fork
    fork_event = json.loads(json.dumps(event))
    fork_event["workflow_run"].update(pull_requests=[], head_repository={"full_name": "x/r"})
    trigger = trusted_trigger("workflow_run", fork_event, "o/r", claimed)
    assert trigger.pr_number == 99 and trigger.fork  # filled from the results, same commit
    with pytest.raises(BotError, match="another commit"):
        trusted_trigger("workflow_run", fork_event, "o/r", {**claimed, "head_sha": "zzz"})
