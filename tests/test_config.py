"""Settings from config files, action inputs and CLI overrides; the paths the bot may change."""

from __future__ import annotations

import pytest
from conftest import ROOT

from bot.config import load_settings, path_allowed, path_matches
from bot.core.errors import BotError
from bot.core.repo_path import PLAIN_RELATIVE
from bot.core.settings import Settings


def pyproject(tmp_path, body: str):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.kernel-bot]\n' + body)
    return tmp_path / "pyproject.toml"


def own_file(tmp_path, body: str):
    (tmp_path / "kernel-bot.toml").write_text(body)
    return tmp_path / "kernel-bot.toml"


def error(tmp_path, environ=None, overrides=None) -> str:
    with pytest.raises(BotError) as exc:
        load_settings(tmp_path, environ or {}, overrides)
    return str(exc.value)


# --- files -------------------------------------------------------------------------------


def test_no_config_file_gives_the_defaults(tmp_path):
    settings = load_settings(tmp_path, {})
    assert settings == Settings()
    assert settings.kernel_paths == ("kernels/**", "problems/**")
    assert (settings.strategy, settings.sandbox, settings.budget_s, settings.model) == (
        "search",
        "process",
        900.0,
        None,
    )


def test_this_repository_has_no_bot_table_and_loads_with_defaults():
    assert load_settings(ROOT, {}) == Settings()


def test_pyproject_table_with_kebab_case_keys(tmp_path):
    pyproject(
        tmp_path,
        'problems-dir = "ops/problems"\nlabel = "speed-me"\nstrategy = "all"\n'
        "budget-s = 60\nmax-rounds = 2\nsamples = 4\nmin-speedup = 1.2\n"
        'model = "gpt-x"\nbackend = "cuda"\nsandbox = "docker"\nmax-open-prs = 0\n'
        'kernel-paths = ["ops/kernels/**"]\ntime-cap-s = 2.5\ndevice = "cpu"\n'
        'timing = "throughput"\n',
    )
    assert load_settings(tmp_path, {}) == Settings(
        problems_dir="ops/problems",
        label="speed-me",
        strategy="all",
        budget_s=60.0,
        max_rounds=2,
        samples=4,
        min_speedup=1.2,
        model="gpt-x",
        backend="cuda",
        sandbox="docker",
        max_open_prs=0,
        kernel_paths=("ops/kernels/**",),
        time_cap_s=2.5,
        device="cpu",
        timing="throughput",
    )


def test_graph_timing_is_a_mode_the_file_may_choose(tmp_path):
    pyproject(tmp_path, 'timing = "graph"\n')
    assert load_settings(tmp_path, {}).timing == "graph"


def test_an_unknown_timing_mode_is_a_clear_error(tmp_path):
    pyproject(tmp_path, 'timing = "fastest"\n')
    assert "timing" in error(tmp_path) and "latency" in error(tmp_path)


def test_plausibility_bound_defaults_to_100x_and_the_file_may_set_it(tmp_path):
    assert load_settings(tmp_path, {}).max_plausible_speedup == 100.0
    pyproject(tmp_path, "max-plausible-speedup = 400\n")
    assert load_settings(tmp_path, {}).max_plausible_speedup == 400.0
    assert load_settings(tmp_path, {}, {"max_plausible_speedup": 50.0}).max_plausible_speedup == 50.0


def test_budget_given_as_toml_integer_becomes_float(tmp_path):
    pyproject(tmp_path, "budget-s = 60\n")
    budget = load_settings(tmp_path, {}).budget_s
    assert budget == 60.0 and isinstance(budget, float)


def test_kernel_bot_toml_takes_top_level_keys(tmp_path):
    own_file(tmp_path, 'label = "go-fast"\nmin-speedup = 1.1\n')
    settings = load_settings(tmp_path, {})
    assert (settings.label, settings.min_speedup) == ("go-fast", 1.1)


def test_kernel_bot_toml_beside_a_pyproject_without_the_table_is_fine(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.ruff]\nline-length = 99\n')
    own_file(tmp_path, "samples = 3\n")
    assert load_settings(tmp_path, {}).samples == 3


def test_both_config_files_is_an_error_naming_both(tmp_path):
    pp = pyproject(tmp_path, 'label = "a"\n')
    own = own_file(tmp_path, 'label = "b"\n')
    assert error(tmp_path) == (f"kernel-bot is configured twice: {pp} ([tool.kernel-bot]) and {own}; keep one")


def test_kernel_bot_table_inside_kernel_bot_toml_is_rejected(tmp_path):
    own = own_file(tmp_path, '[kernel-bot]\nlabel = "b"\n')
    assert error(tmp_path) == f"{own}: put the keys at the top level, not in a [kernel-bot] table"


def test_unknown_key_with_closest_suggestion(tmp_path):
    pp = pyproject(tmp_path, 'min-speedp = 1.1\nmax_open_prs = 2\ncolour = "red"\n')
    message = error(tmp_path)
    assert message.startswith(
        f"{pp}: unknown [tool.kernel-bot] key(s) 'min-speedp' (did you mean 'min-speedup'?), "
        "'max_open_prs' (did you mean 'max-open-prs'?), 'colour'; known: problems-dir, label, "
    )
    assert message.endswith("time-cap-s, timing, device")


def test_unknown_key_in_kernel_bot_toml(tmp_path):
    own = own_file(tmp_path, 'strategie = "llm"\n')
    assert error(tmp_path).startswith(f"{own}: unknown key(s) 'strategie' (did you mean 'strategy'?)")


@pytest.mark.parametrize(
    "line, message",
    [
        ('budget-s = "900"', "budget-s: expected a positive number of seconds, got '900'"),
        ("budget-s = -5", "budget-s: expected a positive number of seconds, got -5"),
        ("budget-s = 0", "budget-s: expected a positive number of seconds, got 0"),
        ("budget-s = nan", "budget-s: expected a positive number of seconds, got nan"),
        ("time-cap-s = -1.0", "time-cap-s: expected a positive number of seconds, got -1.0"),
        ("min-speedup = 0.9", "min-speedup: expected a number >= 1 (1.05 = 5% faster), got 0.9"),
        (
            "max-plausible-speedup = 1",
            "max-plausible-speedup: expected a number > 1 (100 = a 100x speedup is flagged), got 1",
        ),
        ('strategy = "fast"', "strategy: expected one of 'search', 'llm', 'all', got 'fast'"),
        ('sandbox = "vm"', "sandbox: expected one of 'process', 'docker', got 'vm'"),
        ('backend = "rocm"', "backend: expected one of 'triton', 'cuda', got 'rocm'"),
        ('device = "gpu"', "device: expected one of 'auto', 'cpu', 'cuda', got 'gpu'"),
        ("max-rounds = 1.5", "max-rounds: expected an integer >= 1, got 1.5"),
        ("samples = true", "samples: expected an integer >= 1, got True"),
        ("samples = 0", "samples: expected an integer >= 1, got 0"),
        ("max-open-prs = -1", "max-open-prs: expected an integer >= 0, got -1"),
        ('label = ""', "label: expected a non-empty string, got ''"),
        ("model = 3", "model: expected a non-empty string, got 3"),
        (
            'chart-path = "docs/chart.svg"',
            f"chart-path: expected {PLAIN_RELATIVE} ending in .png, or \"\" for no chart, got 'docs/chart.svg'",
        ),
        (
            'chart-path = "/tmp/x.png"',
            f"chart-path: expected {PLAIN_RELATIVE}, got '/tmp/x.png'",
        ),
        (
            'kernel-paths = "kernels/**"',
            "kernel-paths: expected a list of repository-relative glob patterns, got 'kernels/**'",
        ),
        (
            'kernel-paths = ["kernels/**", "/etc/**"]',
            f"kernel-paths: expected glob patterns, each {PLAIN_RELATIVE}; "
            "'/etc/**' is not, got ['kernels/**', '/etc/**']",
        ),
        (
            'kernel-paths = ["kernels/../../home/**"]',
            f"kernel-paths: expected glob patterns, each {PLAIN_RELATIVE}; "
            "'kernels/../../home/**' is not, got ['kernels/../../home/**']",
        ),
        (
            'kernel-paths = ["C:\\\\Windows\\\\**"]',
            f"kernel-paths: expected glob patterns, each {PLAIN_RELATIVE}; "
            "'C:\\\\Windows\\\\**' is not, got ['C:\\\\Windows\\\\**']",
        ),
        (
            'problems-dir = "../elsewhere"',
            f"problems-dir: expected {PLAIN_RELATIVE}, got '../elsewhere'",
        ),
    ],
)
def test_bad_values_name_file_key_and_expectation(tmp_path, line, message):
    pp = pyproject(tmp_path, line + "\n")
    assert error(tmp_path) == f"{pp}: [tool.kernel-bot] {message}"


def test_bad_value_in_kernel_bot_toml_has_no_table_prefix(tmp_path):
    own = own_file(tmp_path, "budget-s = -1\n")
    assert error(tmp_path) == f"{own}: budget-s: expected a positive number of seconds, got -1"


def test_invalid_toml_names_the_file(tmp_path):
    pp = pyproject(tmp_path, "label = \n")
    assert error(tmp_path).startswith(f"{pp}: not valid TOML: ")


def test_bot_table_that_is_not_a_table(tmp_path):
    (tmp_path / "pyproject.toml").write_text("tool = {kernel-bot = 3}\n")
    assert error(tmp_path) == f"{tmp_path / 'pyproject.toml'}: [tool.kernel-bot] must be a table"


# --- precedence ----------------------------------------------------------------------------


def test_precedence_file_then_environment_then_overrides(tmp_path):
    pyproject(
        tmp_path,
        'label = "file"\nstrategy = "llm"\nbudget-s = 100\nmodel = "file-model"\n'
        'min-speedup = 1.5\nsandbox = "docker"\nsamples = 7\n',
    )
    environ = {
        "KERNEL_BOT_LABEL": "env",
        "KERNEL_BOT_STRATEGY": "all",
        "KERNEL_BOT_BUDGET_S": "200",
        "KERNEL_BOT_MODEL": "",
        "KERNEL_BOT_MIN_SPEEDUP": "  ",
        "KERNEL_BOT_SANDBOX": "process",
    }
    overrides = {"strategy": "search", "budget_s": None, "samples": 9, "model": None}
    settings = load_settings(tmp_path, environ, overrides)
    assert settings.label == "env"  # env beats file
    assert settings.strategy == "search"  # override beats env and file
    assert settings.budget_s == 200.0  # None override = unset, env stays
    assert settings.model == "file-model"  # empty env = unset, file stays
    assert settings.min_speedup == 1.5  # blank env = unset
    assert settings.sandbox == "process"
    assert settings.samples == 9  # override beats file


def test_environment_defaults_to_os_environ(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNEL_BOT_STRATEGY", "llm")
    monkeypatch.setenv("KERNEL_BOT_MIN_SPEEDUP", "1.25")
    settings = load_settings(tmp_path)
    assert (settings.strategy, settings.min_speedup) == ("llm", 1.25)


def test_unrelated_kernel_bot_variables_are_ignored(tmp_path):
    # action.yml and the docker backend use these; they are not settings.
    environ = {"KERNEL_BOT": "/venv/bin/bot", "KERNEL_BOT_IMAGE": "img", "KERNEL_BOT_PYTHON": "py"}
    assert load_settings(tmp_path, environ) == Settings()


@pytest.mark.parametrize(
    "var, value, message",
    [
        (
            "KERNEL_BOT_BUDGET_S",
            "abc",
            "environment variable KERNEL_BOT_BUDGET_S (action input 'budget-s'): expected a number, got 'abc'",
        ),
        (
            "KERNEL_BOT_BUDGET_S",
            "-3",
            "environment variable KERNEL_BOT_BUDGET_S (action input "
            "'budget-s'): expected a positive number of seconds, got '-3'",
        ),
        (
            "KERNEL_BOT_MIN_SPEEDUP",
            "0.5",
            "environment variable KERNEL_BOT_MIN_SPEEDUP (action input "
            "'min-speedup'): expected a number >= 1 (1.05 = 5% faster), got '0.5'",
        ),
        (
            "KERNEL_BOT_STRATEGY",
            "fast",
            "environment variable KERNEL_BOT_STRATEGY (action input "
            "'strategy'): expected one of 'search', 'llm', 'all', got 'fast'",
        ),
        (
            "KERNEL_BOT_SANDBOX",
            "vm",
            "environment variable KERNEL_BOT_SANDBOX (action input "
            "'sandbox'): expected one of 'process', 'docker', got 'vm'",
        ),
    ],
)
def test_bad_action_inputs_name_the_variable(tmp_path, var, value, message):
    assert error(tmp_path, {var: value}) == message


def test_bad_override_names_the_option(tmp_path):
    assert (
        error(tmp_path, overrides={"budget_s": -1.0})
        == "option --budget-s: expected a positive number of seconds, got -1.0"
    )
    assert error(tmp_path, overrides={"kernel_paths": ["../x/**"]}).startswith(
        "option --kernel-paths: expected glob patterns, each a plain repository-relative path"
    )


def test_unknown_override_suggests_the_setting(tmp_path):
    assert error(tmp_path, overrides={"budget": 3}) == "unknown setting(s) 'budget' (did you mean 'budget_s'?)"


def test_override_may_point_problems_dir_outside_the_repository(tmp_path):
    # The person at the command line is trusted; only the (possibly PR-supplied) file is fenced.
    settings = load_settings(tmp_path, {}, {"problems_dir": "/abs/problems", "kernel_paths": ["a/**", "b/*.py"]})
    assert settings.problems_dir == "/abs/problems"
    assert settings.kernel_paths == ("a/**", "b/*.py")


# --- paths the bot may change -------------------------------------------------------------


@pytest.mark.parametrize(
    "path, allowed",
    [
        ("kernels/rmsnorm_triton.py", True),
        ("kernels/sub/dir/x.cu", True),
        ("problems/rmsnorm.py", True),
        ("./kernels/a.py", False),  # a plain path has one spelling (bot.core.repo_path)
        ("kernels", False),
        (".github/workflows/optimize-kernel.yml", False),
        ("bot/cli/main.py", False),
        ("pyproject.toml", False),
        ("/work/kernels/a.py", False),
        ("kernels/../.github/workflows/x.yml", False),
        ("../kernels/a.py", False),
        ("kernels\\..\\bot\\cli/main.py", False),
        ("", False),
    ],
)
def test_path_allowed_with_default_kernel_paths(path, allowed):
    assert path_allowed(path, Settings()) is allowed


@pytest.mark.parametrize(
    "path, pattern, matches",
    [
        ("kernels/rmsnorm_triton.py", "kernels/rmsnorm*", True),
        ("kernels/rmsnorm/inner.py", "kernels/rmsnorm*", False),  # `*` stays inside one segment
        ("csrc/a/b/swiglu.cu", "csrc/**/swiglu*.cu", True),
        ("csrc/swiglu.cu", "csrc/**/swiglu*.cu", True),  # `**` may be zero segments
        ("swiglu.cu", "**/swiglu.cu", True),
        ("kernels/k1.py", "kernels/k[0-9].py", True),
        ("kernels/kx.py", "kernels/k[!0-9].py", True),
        ("kernels/k?.py", "kernels/k?.py", True),
        ("kernels/ab.py", "kernels/?.py", False),
        ("Kernels/a.py", "kernels/*.py", False),  # case-sensitive, like git
    ],
)
def test_path_matches_glob_semantics(path, pattern, matches):
    assert path_matches(path, pattern) is matches


def test_custom_kernel_paths(tmp_path):
    pyproject(tmp_path, 'kernel-paths = ["ops/*.py", "csrc/**/*.cu"]\n')
    settings = load_settings(tmp_path, {})
    assert path_allowed("ops/gelu.py", settings)
    assert path_allowed("csrc/a/b/gelu.cu", settings)
    assert not path_allowed("ops/sub/gelu.py", settings)
    assert not path_allowed("kernels/gelu.py", settings)


def test_a_gpu_timing_mode_on_a_cpu_is_timed_and_cached_as_latency():
    from bot.cli.engine_options import evaluation_options
    from bot.core.settings import Settings, TimingMode

    assert evaluation_options(Settings(timing=TimingMode.GRAPH), "cuda").timing.mode == "graph"
    assert evaluation_options(Settings(timing=TimingMode.GRAPH), "cpu").timing.mode == "latency"
    assert evaluation_options(Settings(timing=TimingMode.THROUGHPUT), "cpu").timing.mode == "latency"
