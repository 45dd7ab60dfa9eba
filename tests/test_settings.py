"""One settings object: one set of defaults, enums for choices, built once per command."""

import dataclasses

import click
import pytest

from bot.cli import main
from bot.config import CHECKS, command_line_settings, load_settings
from bot.core.errors import BotError
from bot.core.settings import DEFAULTS, DeviceChoice, SandboxKind, Settings, Strategy, TimingMode, TolerancePolicy
from bot.engine.evaluate import EvalOptions
from bot.engine.optimize import OptimizeOptions
from bot.engine.timing import TimingOptions
from bot.options import evaluation_options, job_options, optimize_options


def _option_defaults(command: click.Command) -> dict[str, object]:
    return {p.name: p.default for p in command.params if isinstance(p, click.Option)}


@pytest.mark.parametrize("command", ["optimize", "dry-run", "run", "bench"])
def test_the_command_lines_defaults_are_the_settings_defaults(command):
    defaults = _option_defaults(main.commands[command])
    shared = {name for name in defaults if name in {f.name for f in dataclasses.fields(Settings)}}
    assert {"min_speedup", "device", "sandbox", "timing"} <= shared
    for name in shared:
        assert defaults[name] == getattr(DEFAULTS, name), name


def test_the_engines_option_objects_default_to_the_settings():
    assert EvalOptions().min_speedup == DEFAULTS.min_speedup
    assert EvalOptions().sandbox == DEFAULTS.sandbox
    assert TimingOptions().mode == DEFAULTS.timing and TimingOptions().replicas == DEFAULTS.replicas
    optimize = OptimizeOptions()
    for field, setting in [
        ("strategy", "strategy"),
        ("budget_s", "budget_s"),
        ("max_rounds", "max_rounds"),
        ("samples", "samples"),
        ("min_speedup", "min_speedup"),
        ("max_plausible_speedup", "max_plausible_speedup"),
        ("max_total_tokens", "max_tokens"),
        ("backend", "backend"),
    ]:
        assert getattr(optimize, field) == getattr(DEFAULTS, setting), field


def test_choices_arrive_as_enums_from_every_source(tmp_path):
    (tmp_path / "kernel-bot.toml").write_text('strategy = "llm"\nsandbox = "docker"\n')
    settings = load_settings(tmp_path, environ={"KERNEL_BOT_STRATEGY": "all"}, overrides={"timing": "graph"})
    assert settings.strategy is Strategy.ALL  # the action input beats the file
    assert settings.sandbox is SandboxKind.DOCKER
    assert settings.timing is TimingMode.GRAPH
    assert settings.device is DeviceChoice.AUTO
    assert settings.strategy == "all"  # and still compares and prints as the word the user wrote
    assert f"{settings.timing}" == "graph"


def test_the_repository_cannot_set_what_only_the_command_line_may(tmp_path):
    # A pull request must not turn off the replicas that keep one process's offset out of the
    # verdicts, nor spend the runner's token budget.
    for key in ("replicas", "max-tokens", "exclude", "use-cache", "tolerance"):
        assert key.replace("-", "_") not in CHECKS
        (tmp_path / "kernel-bot.toml").write_text(f"{key} = 1\n")
        with pytest.raises(BotError, match="unknown key"):
            load_settings(tmp_path, environ={})
    assert command_line_settings({"replicas": 4}).replicas == 4
    # Nor loosen the rule its own code is judged by.
    assert command_line_settings({"tolerance": "kernelbench"}).tolerance is TolerancePolicy.KERNELBENCH
    with pytest.raises(BotError, match="--tolerance: expected one of 'strict', 'kernelbench'"):
        command_line_settings({"tolerance": "loose"})
    with pytest.raises(BotError, match="--replicas"):
        command_line_settings({"replicas": 0})


def test_the_option_objects_are_derived_from_the_one_settings_object():
    settings = Settings(
        min_speedup=1.2, budget_s=30.0, samples=3, max_tokens=999, exclude=("a*",), replicas=3, time_cap_s=2.0
    )
    options = optimize_options(Settings(**{**dataclasses.asdict(settings), "device": DeviceChoice.CPU}))
    assert (options.min_speedup, options.budget_s, options.samples) == (1.2, 30.0, 3)
    assert options.max_total_tokens == 999 and options.exclude == ("a*",)
    assert options.evaluation.min_speedup == 1.2
    assert options.evaluation.timing.replicas == 3 and options.evaluation.timing.time_cap_s == 2.0
    assert evaluation_options(settings, "cpu").device == "cpu"
    assert evaluation_options(settings, "cpu").tolerance is TolerancePolicy.STRICT
    kernelbench = Settings(tolerance=TolerancePolicy.KERNELBENCH, device=DeviceChoice.CPU)
    assert optimize_options(kernelbench).evaluation.tolerance is TolerancePolicy.KERNELBENCH


def test_a_cpu_job_leaves_max_autotune_out_unless_told_what_to_leave_out():
    cpu = Settings(device=DeviceChoice.CPU)
    assert job_options(cpu).exclude == ("compile-max-autotune*",)
    assert job_options(dataclasses.replace(cpu, exclude=("x",))).exclude == ("x",)
    assert job_options(cpu).evaluation.device == "cpu"
