"""Where the process sandbox cannot contain candidates (not root, no namespaces, no cgroup or
process limit), the bot says so and refuses to run them unless the user opts in at the
command line (docs/sandbox.md, "Where containment falls short")."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from click.testing import CliRunner
from conftest import CANDIDATES, PROBLEMS

from bot.cli.engine_options import evaluation_options
from bot.cli.main import main
from bot.config import load_settings
from bot.core.errors import BotError
from bot.sandbox import contained, process
from bot.sandbox.contained import Uncontained, containment
from bot.sandbox.process import ProcessSandbox


@pytest.fixture
def fresh_probe():
    """containment() is decided once per process: decided again here, and after the test."""
    containment.cache_clear()
    yield
    containment.cache_clear()


def test_a_bot_that_is_not_root_says_so_and_refuses_the_process_sandbox(fresh_probe, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # what the namespace probe asks first
    mode = containment()
    assert "not root" in mode.description and not mode.complete
    with pytest.raises(Uncontained, match="not root.*--allow-uncontained"):
        ProcessSandbox(start_fork_server=False)
    ProcessSandbox(start_fork_server=False, allow_uncontained=True)  # the user's choice


def _short_of_containment() -> contained.Mode:
    return contained.Mode(False, False, False, False, "none: not root")


def test_bot_verify_refuses_with_exit_2_and_says_how_to_go_on(monkeypatch):
    monkeypatch.setattr(process, "containment", _short_of_containment)
    done = CliRunner().invoke(main, ["verify", str(PROBLEMS / "scale_add.py"), str(CANDIDATES / "honest.py")])
    assert done.exit_code == 2, done.output
    assert "cannot contain candidates" in done.output and "--allow-uncontained" in done.output
    assert "none: not root" in done.output


def test_bot_verify_runs_uncontained_when_the_user_allows_it(monkeypatch):
    monkeypatch.setattr(process, "containment", _short_of_containment)
    done = CliRunner().invoke(
        main,
        ["verify", "--allow-uncontained", str(PROBLEMS / "scale_add.py"), str(CANDIDATES / "honest.py")],
    )
    assert done.exit_code in (0, 1) and "values" in done.output, done.output  # a verdict, not a refusal
    assert "cannot contain" not in done.output


def test_only_the_command_line_may_allow_it(tmp_path):
    assert evaluation_options(load_settings(None, overrides={"allow_uncontained": True}), "cpu").allow_uncontained
    assert not evaluation_options(load_settings(None, overrides={}), "cpu").allow_uncontained
    (tmp_path / "kernel-bot.toml").write_text("allow-uncontained = true\n")
    with pytest.raises(BotError, match="unknown key"):
        load_settings(tmp_path, environ={})


def test_a_complete_containment_needs_every_part():
    whole = contained.Mode(True, True, True, True, "cgroup+pids+pidns+netns+mntns+uid")
    assert whole.complete
    for part in ("cgroups", "pids", "namespaces", "uid"):
        assert not replace(whole, **{part: False}).complete, part
