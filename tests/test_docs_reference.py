"""The documentation is reference, not a lab notebook.

(a) Every repository path the docs cite exists: paths under the repository's top-level folders
    (`bot/...`, `docs/...`, `benchmarks/...`, `ci/...`, `tests/...`, ...), backticked, linked or in
    prose and commands, and evidence file names (`h200-2026-12-05-....log`); globs must match.
(b) No diary: no sessions, numbered runs or "we found" in the docs, no run numbers or session
    asides in product code, tests or file names, and every evidence file is cited by a doc.
"""

from __future__ import annotations

import fnmatch
import glob
import re
from pathlib import Path

import pytest
from conftest import ROOT

EVIDENCE = ROOT / "docs" / "evidence"

# Paths in the target repository's configuration or in usage examples, not in this repository.
EXAMPLE_PATHS = {"kernels/x.py", "docs/kernel-bot/speedups.png"}


def _docs() -> list[Path]:
    found = [
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        ROOT / "benchmarks" / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
    ]
    return [p for p in found if p.exists()]


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


TOP = r"(?:bot|docs|benchmarks|ci|tests|problems|kernels|\.github|\.ci)"
GLOB_CLASS = r"\[[\w-]+\]"  # `h200-2026-12-0[45]-...`: a glob's character class, not a link's bracket
REPO_PATH = re.compile(rf"(?<![\w/.$~-]){TOP}/(?:[\w./*-]|{GLOB_CLASS})*(?:[\w*]|{GLOB_CLASS})")
EVIDENCE_NAME = re.compile(
    rf"(?<![\w$-])(?:h100|h200|cpu)-\d{{4}}-\d{{2}}-(?:\d|{GLOB_CLASS})+-(?:[\w.*-]|{GLOB_CLASS})*?"
    r"\.(?:log|txt|json|md)(?:\.gz)?\b"
)


def _exists(pattern: str, base: Path) -> bool:
    if any(c in pattern for c in "*["):
        return bool(glob.glob(str(base / pattern), recursive=True))
    return (base / pattern).exists()


def cited_paths(text: str) -> set[str]:
    return set(REPO_PATH.findall(text))


def cited_evidence(text: str) -> set[str]:
    return set(EVIDENCE_NAME.findall(text))


@pytest.mark.parametrize("doc", _docs(), ids=_rel)
def test_every_cited_path_exists(doc):
    text = doc.read_text()
    missing = sorted(p for p in cited_paths(text) - EXAMPLE_PATHS if not _exists(p, ROOT))
    missing += sorted(e for e in cited_evidence(text) if not _exists(e, EVIDENCE))
    assert not missing, f"{_rel(doc)} cites what does not exist: {missing}"


def test_the_path_pattern_finds_what_docs_cite():
    text = (
        "see docs/verifier.md. Run `python3 benchmarks/aa_noise.py`; `tests/test_gpu.py::test_x`; "
        "[ci/README.md](ci/README.md); /tmp/docs/nothing.md and $OUT/bot/x.py are not ours; "
        "`h200-2026-12-0[45]-gpu-test*.log`, docs/evidence/h200-2026-12-05-machine.txt."
    )
    assert cited_paths(text) == {
        "docs/verifier.md",
        "benchmarks/aa_noise.py",
        "tests/test_gpu.py",
        "ci/README.md",
        "docs/evidence/h200-2026-12-05-machine.txt",
    }
    assert cited_evidence(text) == {"h200-2026-12-0[45]-gpu-test*.log", "h200-2026-12-05-machine.txt"}


ORDINAL = (
    r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
    r"thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|"
    r"\d+(?:st|nd|rd|th))"
)
# Anywhere in the docs.
DOC_DIARY = [
    re.compile(r"\bsessions?\b", re.I),
    re.compile(rf"\b{ORDINAL}\s+(?:device\s+)?(?:run|session|sweep|probe)s?\b", re.I),
    re.compile(r"\bwe (?:found|saw|measured|tried|noticed|learned)\b", re.I),
    re.compile(r"\bs\d{1,2}\b"),
    re.compile(r"-s\d{1,2}-"),
    re.compile(r"\bstill to do\b", re.I),
    re.compile(r"\d{1,2}:\d{2}\s*[–-]\s*\d{1,2}:\d{2} UTC"),
]
# In product code and tests, where "session" is also a word of the trade (a requests session,
# `start_new_session`, an evaluation's `Session`): only its diary forms.
CODE_DIARY = [
    re.compile(rf"\b{ORDINAL}\s+(?:device\s+)?sessions?\b", re.I),
    re.compile(r"\bdevice sessions?\b", re.I),
    re.compile(r"\bsessions? \d{1,2}\b", re.I),
    re.compile(r"-s\d{1,2}-"),
    re.compile(r"\bprobe_s\d"),
]
# File names: run numbers anywhere; "session" in the docs, benchmarks and CI folders.
NAME_RUN_NUMBER = re.compile(r"(?:^|[-_.])s\d{1,2}(?:[-_.]|$)")
EVIDENCE_NAMING = re.compile(r"^(?:h100|h200|cpu)-\d{4}-\d{2}-\d{2}-[a-z0-9_.-]+$")
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", "kernel-bot-out"}


def _files(*folders: str) -> list[Path]:
    out = []
    for folder in folders:
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and not SKIP_DIRS & set(path.relative_to(ROOT).parts):
                out.append(path)
    return out


def diary_markers(text: str, patterns) -> list[str]:
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        found += [f"{n}: {m.group(0)!r}" for p in patterns for m in p.finditer(line)]
    return found


@pytest.mark.parametrize("doc", _docs(), ids=_rel)
def test_docs_read_as_reference_not_as_a_diary(doc):
    found = diary_markers(doc.read_text(), DOC_DIARY)
    assert not found, f"{_rel(doc)}: diary wording at {found}"


def test_product_code_and_tests_carry_no_diary_asides():
    this = Path(__file__).resolve()
    found = []
    for path in _files("bot", "tests", "benchmarks", "ci"):
        if path.suffix not in (".py", ".sh", ".md") or path.resolve() == this:
            continue
        found += [f"{_rel(path)}:{m}" for m in diary_markers(path.read_text(errors="replace"), CODE_DIARY)]
    assert not found, found


def test_file_names_carry_no_run_numbers_or_sessions():
    bad = [
        _rel(p)
        for p in _files("bot", "tests", "docs", "benchmarks", "ci", "problems", "kernels")
        if NAME_RUN_NUMBER.search(p.name)
    ]
    bad += [_rel(p) for p in _files("docs", "benchmarks", "ci") if "session" in p.name.lower()]
    assert not bad, bad


def test_diary_patterns_catch_what_they_are_for():
    assert diary_markers("## Twentieth session (2026-12-05, 05:10–05:52 UTC)", DOC_DIARY)
    assert diary_markers("the third run of the day", DOC_DIARY)
    assert diary_markers("`h200-2026-12-04-s13-machine.txt`", DOC_DIARY)
    assert not diary_markers("a new process group (`setsid`), the first call compiles", DOC_DIARY)
    assert diary_markers("# seen on the H200 (nineteenth session)", CODE_DIARY)
    assert not diary_markers("with open_session(problem) as session:  # start_new_session=True", CODE_DIARY)
    assert NAME_RUN_NUMBER.search("probe_s10.py") and NAME_RUN_NUMBER.search("h200-2026-12-04-s13-aa.log")
    assert not NAME_RUN_NUMBER.search("h200-2026-12-05-aa-gelu-decode-16-processes-plain-1.json.gz")


def test_evidence_is_named_small_and_cited():
    cited = set()
    for doc in _docs():
        text = doc.read_text()
        cited |= cited_evidence(text)
        cited |= {p.removeprefix("docs/evidence/") for p in cited_paths(text) if p.startswith("docs/evidence/")}
    problems = []
    for path in sorted(EVIDENCE.iterdir()):
        name = path.name
        if not EVIDENCE_NAMING.match(name):
            problems.append(f"{name}: not named machine-date-what")
        limit = 1 << 20 if name.endswith(".gz") else 256 << 10
        if path.stat().st_size > limit:
            problems.append(f"{name}: {path.stat().st_size} bytes; compress it (.gz) or cite less")
        if not any(fnmatch.fnmatch(name, c) for c in cited):
            problems.append(f"{name}: cited by no doc")
    assert not problems, problems
