"""One settings object: one set of defaults, enums for choices, built once per command."""

import dataclasses
import json

import click
import pytest

from bot.cli.engine_options import (
    VERIFY_MIN_SAMPLES,
    VERIFY_TIME_CAP_S,
    evaluation_options,
    job_options,
    optimize_options,
    resolve_device,
    verify_options,
)
from bot.cli.main import main
from bot.config import CHECKS, load_settings
from bot.core.errors import BotError
from bot.core.settings import (
    DEFAULTS,
    Device,
    DeviceChoice,
    SandboxKind,
    Settings,
    Strategy,
    TimingMode,
    TolerancePolicy,
)
from bot.engine.evaluation.options import EvalOptions
from bot.engine.loop.attempts import OptimizeOptions
from bot.engine.timing.records import TimingOptions


def _option_defaults(command: click.Command) -> dict[str, object]:
    return {p.name: p.default for p in command.params if isinstance(p, click.Option)}


@pytest.mark.parametrize("command", ["optimize", "dry-run", "run", "bench"])
def test_the_command_lines_defaults_are_the_settings_defaults(command):
    defaults = _option_defaults(main.commands[command])
    shared = {name for name in defaults if name in {f.name for f in dataclasses.fields(Settings)}}
    assert {"min_speedup", "device", "sandbox", "timing"} <= shared
    for name in shared:
        assert defaults[name] == getattr(DEFAULTS, name), name


# Where a field's name is not its setting's: the timing mode is a field of the timing options,
# where "timing" would say nothing, and the evaluation's `timing` is those options, no setting.
SETTING_OF = {(TimingOptions, "mode"): "timing", (EvalOptions, "timing"): None}


@pytest.mark.parametrize("kind", [EvalOptions, TimingOptions, OptimizeOptions])
def test_an_option_object_has_the_settings_default_or_none(kind):
    # One source of defaults: a field a setting decides has no default of its own (it is derived
    # from the run's settings, bot.cli.engine_options) or the settings' own.
    settings = {f.name for f in dataclasses.fields(Settings)}
    decided = 0
    for field in dataclasses.fields(kind):
        setting = SETTING_OF.get((kind, field.name), field.name)
        if setting is None or setting not in settings:
            continue
        decided += 1
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            continue
        assert field.default == getattr(DEFAULTS, setting), f"{kind.__name__}.{field.name}"
    assert decided >= 3


def test_the_device_and_the_cache_are_never_assumed():
    # The settings' device is a choice ("auto") and their cache is on: an option object built
    # without the settings states both.
    with pytest.raises(TypeError):
        EvalOptions()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        EvalOptions(device="cpu")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        OptimizeOptions()  # type: ignore[call-arg]


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
    assert load_settings(None, overrides={"replicas": 4}).replicas == 4
    # Nor loosen the rule its own code is judged by.
    assert load_settings(None, overrides={"tolerance": "kernelbench"}).tolerance is TolerancePolicy.KERNELBENCH
    with pytest.raises(BotError, match="--tolerance: expected one of 'strict', 'kernelbench'"):
        load_settings(None, overrides={"tolerance": "loose"})
    with pytest.raises(BotError, match="--replicas"):
        load_settings(None, overrides={"replicas": 0})


def test_the_option_objects_are_derived_from_the_one_settings_object():
    settings = Settings(
        min_speedup=1.2, budget_s=30.0, samples=3, max_tokens=999, exclude=("a*",), replicas=3, time_cap_s=2.0
    )
    options = optimize_options(Settings(**{**dataclasses.asdict(settings), "device": DeviceChoice.CPU}))
    assert (options.min_speedup, options.budget_s, options.samples) == (1.2, 30.0, 3)
    assert options.max_tokens == 999 and options.exclude == ("a*",)
    assert options.evaluation.min_speedup == 1.2
    assert options.evaluation.timing.replicas == 3 and options.evaluation.timing.time_cap_s == 2.0
    assert evaluation_options(settings, "cpu").device == "cpu"
    assert evaluation_options(settings, "cpu").tolerance is TolerancePolicy.STRICT
    kernelbench = Settings(tolerance=TolerancePolicy.KERNELBENCH, device=DeviceChoice.CPU)
    assert optimize_options(kernelbench).evaluation.tolerance is TolerancePolicy.KERNELBENCH


def test_verify_derives_its_short_timed_phase_from_the_settings():
    settings = Settings(device=DeviceChoice.CPU, tolerance=TolerancePolicy.KERNELBENCH, replicas=3)
    options = verify_options(settings)
    assert (options.timing.time_cap_s, options.timing.min_samples) == (VERIFY_TIME_CAP_S, VERIFY_MIN_SAMPLES)
    assert options.timing.replicas == 3 and options.tolerance is TolerancePolicy.KERNELBENCH
    assert not options.use_cache


def test_every_command_builds_its_settings_with_the_one_builder(tmp_path):
    # The commands on problem files take the defaults under their options alone; those on a
    # repository take its file and action inputs too. Both are bot.config.load_settings.
    (tmp_path / "kernel-bot.toml").write_text("min-speedup = 1.5\n")
    assert load_settings(None, {"KERNEL_BOT_MIN_SPEEDUP": "2"}, {"samples": 3}) == Settings(samples=3)
    assert load_settings(tmp_path, {}, {"samples": 3}) == Settings(min_speedup=1.5, samples=3)


def test_the_resolved_device_is_an_enum_that_serialises_as_its_word():
    assert resolve_device(DeviceChoice.CPU) is Device.CPU
    assert evaluation_options(Settings(device=DeviceChoice.CPU)).device is Device.CPU
    # Workers and results.json get the word, as they did when the device was a string.
    assert json.dumps({"device": Device.CUDA}) == '{"device": "cuda"}'
    assert Device.CPU == "cpu" and f"{Device.CUDA}" == "cuda"


def test_a_cpu_job_leaves_max_autotune_out_unless_told_what_to_leave_out():
    cpu = Settings(device=DeviceChoice.CPU)
    assert job_options(cpu).exclude == ("compile-max-autotune*",)
    assert job_options(dataclasses.replace(cpu, exclude=("x",))).exclude == ("x",)
    assert job_options(cpu).evaluation.device == "cpu"
