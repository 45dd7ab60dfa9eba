"""Loading problem files: KernelBench files as they are, metadata, and clear errors."""

from __future__ import annotations

import pytest
from conftest import PROBLEMS, ROOT

from bot.core.errors import ProblemError
from bot.engine.evaluation.evaluate import evaluate
from bot.engine.workspace.problems import find_problems, load_problem

KERNELBENCH = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, A, B):
        return torch.matmul(A, B)

M = 64
N = 32
K = 48

def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]

def get_init_inputs():
    return []
"""


def test_unchanged_kernelbench_file_loads_with_defaults(tmp_path):
    path = tmp_path / "1_Square_matrix_multiplication_.py"
    path.write_text(KERNELBENCH)
    problem = load_problem(path)
    assert problem.target is None and problem.watch == ()
    assert [s.name for s in problem.gpu_shapes] == ["default"]
    assert problem.distributions == ("standard", "shifted", "large", "zeros", "rows", "limits", "offset", "mixed")
    assert problem.skipped_distributions == {}
    assert problem.reference_precision == "float64"


def test_a_problem_skips_distributions_only_with_a_stated_reason(tmp_path):
    path = tmp_path / "logs.py"
    path.write_text(
        KERNELBENCH + 'SKIP_DISTRIBUTIONS = {"zeros": "log of the inputs:   must be positive",\n'
        '                      "limits": "exp of the product overflows"}\n'
    )
    problem = load_problem(path, root=tmp_path)
    assert problem.distributions == ("standard", "shifted", "large", "rows", "offset", "mixed")
    assert problem.skipped_distributions == {
        "zeros": "log of the inputs: must be positive",
        "limits": "exp of the product overflows",
    }
    # The older DISTRIBUTIONS (the ones kept) still works; what it leaves out says so.
    path.write_text(KERNELBENCH + 'DISTRIBUTIONS = ("standard", "large")\n')
    problem = load_problem(path, root=tmp_path)
    assert problem.distributions == ("standard", "large")
    assert set(problem.skipped_distributions) == {"shifted", "zeros", "rows", "limits", "offset", "mixed"}
    assert "DISTRIBUTIONS" in problem.skipped_distributions["zeros"]


def test_metadata_is_read_without_running_the_file(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "impl.py").write_text("class ModelNew: pass\n")
    path = tmp_path / "p.py"
    path.write_text(
        KERNELBENCH + 'raise SystemExit("executed!")\nTARGET = "kernels/impl.py"\n'
        'SHAPES = {"big": {"M": 4096}, "small": {"M": 8}}\nCPU_SHAPES = {"tiny": {"M": 4}}\n'
        'TOLERANCE = {"norm_rel": 1e-3}\nWATCH = ["kernels/**"]\n'
    )
    problem = load_problem(path, root=tmp_path)
    assert problem.target == tmp_path / "kernels" / "impl.py"
    assert [s.name for s in problem.shapes_for("cuda")] == ["big", "small"]
    assert problem.shapes_for("cpu")[0].overrides == {"M": 4}
    assert problem.tolerance == {"norm_rel": 1e-3} and problem.watch == ("kernels/**",)


@pytest.mark.parametrize(
    "text,message",
    [
        ("def get_inputs(): pass\ndef get_init_inputs(): pass\n", "no class Model"),
        ("class Model: pass\ndef get_init_inputs(): pass\n", "no function get_inputs"),
        ("class Model(:\n", "syntax error"),
        (KERNELBENCH + "SHAPES = {'x': {'NOPE': 1}}\n", "does not define at module level"),
        (KERNELBENCH + "SHAPES = make_shapes()\n", "must be a literal"),
        (KERNELBENCH + "TARGET = 'missing.py'\n", "is not a file inside"),
        (KERNELBENCH + "TARGET = '../../etc/passwd'\n", "is not a file inside"),
        (KERNELBENCH + "DISTRIBUTIONS = ('zeros',)\n", "DISTRIBUTIONS leaves out 'standard'"),
        (KERNELBENCH + "DISTRIBUTIONS = ('standard', 'uniform')\n", "'uniform', which is not a distribution"),
        (KERNELBENCH + "SKIP_DISTRIBUTIONS = {'ones': 'no reason'}\n", "'ones', which is not a distribution"),
        (KERNELBENCH + "SKIP_DISTRIBUTIONS = {'zeros': '  '}\n", "must state a reason"),
        (KERNELBENCH + "SKIP_DISTRIBUTIONS = ('zeros',)\n", "dict of name -> reason"),
        (KERNELBENCH + "SKIP_DISTRIBUTIONS = {'standard': 'slow'}\n", "cannot be skipped"),
        (
            KERNELBENCH + "DISTRIBUTIONS = ('standard', 'zeros')\nSKIP_DISTRIBUTIONS = {'zeros': 'x'}\n",
            "both kept by DISTRIBUTIONS and skipped",
        ),
        (KERNELBENCH + "TOLERANCE = {'atol': 1}\n", "TOLERANCE"),
    ],
)
def test_static_errors_are_one_clear_line(tmp_path, text, message):
    path = tmp_path / "bad.py"
    path.write_text(text)
    with pytest.raises(ProblemError) as err:
        load_problem(path, root=tmp_path)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "body,message",
    [
        ("import not_a_module_xyz\n" + KERNELBENCH, "No module named 'not_a_module_xyz'"),
        (KERNELBENCH.replace("return [A, B]", "return 3"), "get_inputs() returned int"),
        (KERNELBENCH.replace("return []\n", "return 5\n"), "get_init_inputs() returned int"),
        (KERNELBENCH.replace("torch.matmul(A, B)", "1 / 0"), "ZeroDivisionError"),
    ],
)
def test_runtime_problem_errors_raise_problem_error(tmp_path, quick_options, body, message):
    path = tmp_path / "bad_runtime.py"
    path.write_text(body)
    problem = load_problem(path, root=tmp_path)
    with pytest.raises(ProblemError) as err:
        evaluate(problem, [], None, quick_options())
    assert message in str(err.value)


def test_bundled_problems_all_load():
    problems = find_problems(ROOT / "problems", root=ROOT)
    assert len(problems) >= 12
    for problem in problems:
        assert problem.gpu_shapes and problem.cpu_shapes
        assert {"prefill", "decode"} <= {s.name for s in problem.gpu_shapes}, problem.name


def test_fixture_problem_two_shapes():
    assert [s.name for s in load_problem(PROBLEMS / "scale_add.py").gpu_shapes] == ["main", "wide"]


@pytest.mark.parametrize(
    "name,message",
    [
        # dropout in training mode (KernelBench level 2's 66 and 83): another random state, another answer
        ("dropout_softmax.py", "it draws random numbers in forward (dropout in training mode?)"),
        # a generator of its own: even from the same random state, another answer
        ("own_generator.py", "its output is not a function of its inputs and seed"),
    ],
)
def test_a_problem_whose_answer_changes_fails_for_its_own_fault_in_one_line(quick_options, name, message):
    problem = load_problem(PROBLEMS / name)
    with pytest.raises(ProblemError) as err:
        evaluate(problem, [], None, quick_options())
    assert message in str(err.value) and "\n" not in str(err.value).strip(), str(err.value)
