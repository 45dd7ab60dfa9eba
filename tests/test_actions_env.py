"""The GitHub Actions environment of a job step (bot.github.actions_env)."""

from __future__ import annotations

import pytest

from bot.core.errors import BotError
from bot.github.actions_env import GitHubEnv, github_env


def actions_env(tmp_path) -> dict[str, str]:
    event = tmp_path / "event.json"
    event.write_text("{}")
    return {
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_REPOSITORY": "octo/kernels",
        "GITHUB_WORKSPACE": str(tmp_path),
        "GITHUB_TOKEN": "ghs_secretsecret",
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "GITHUB_OUTPUT": str(tmp_path / "out"),
        "GITHUB_SHA": "a" * 40,
        "GITHUB_RUN_ID": "42",
    }


def test_github_env_reads_every_variable(tmp_path):
    env = github_env(actions_env(tmp_path))
    assert env == GitHubEnv(
        event_path=tmp_path / "event.json",
        event_name="pull_request",
        repository="octo/kernels",
        workspace=tmp_path,
        api_url="https://api.github.com",
        step_summary=tmp_path / "summary.md",
        output=tmp_path / "out",
        sha="a" * 40,
        run_id="42",
        token="ghs_secretsecret",
    )


def test_token_never_appears_in_repr(tmp_path):
    env = github_env(actions_env(tmp_path))
    assert "ghs_secretsecret" not in repr(env) and "ghs_secretsecret" not in str(env)
    assert env.token == "ghs_secretsecret"


def test_api_url_for_github_enterprise(tmp_path):
    env = github_env({**actions_env(tmp_path), "GITHUB_API_URL": "https://ghe.example/api/v3/"})
    assert env.api_url == "https://ghe.example/api/v3"


def test_token_is_optional(tmp_path):
    environ = actions_env(tmp_path)
    del environ["GITHUB_TOKEN"]
    assert github_env(environ).token is None


@pytest.mark.parametrize("var", ["GITHUB_EVENT_PATH", "GITHUB_EVENT_NAME", "GITHUB_REPOSITORY", "GITHUB_WORKSPACE"])
def test_missing_required_variable_is_named(tmp_path, var):
    environ = {**actions_env(tmp_path), var: ""}
    with pytest.raises(BotError) as exc:
        github_env(environ)
    assert str(exc.value) == (f"{var} not set: `bot run` runs inside GitHub Actions (use `bot dry-run` locally)")


def test_nothing_required_outside_actions():
    env = github_env({}, required=())
    assert env.event_path is None and env.repository is None and env.token is None
    assert env.api_url == "https://api.github.com"


def test_event_path_must_exist(tmp_path):
    environ = {**actions_env(tmp_path), "GITHUB_EVENT_PATH": str(tmp_path / "missing.json")}
    with pytest.raises(BotError, match=r"GITHUB_EVENT_PATH=.*missing\.json: no such file"):
        github_env(environ)


def test_repository_must_be_owner_slash_name(tmp_path):
    with pytest.raises(BotError) as exc:
        github_env({**actions_env(tmp_path), "GITHUB_REPOSITORY": "octo/kernels/../x y"})
    assert str(exc.value) == "GITHUB_REPOSITORY='octo/kernels/../x y': expected 'owner/name'"
