"""What every search candidate starts from, and how its module is put together.

Every candidate is a self-contained module: the source of the implementation it derives
from (the problem's reference, or its TARGET), followed by a small wrapper that defines
`ModelNew` by subclassing it. So it keeps the same constructor and parameter names, and a
follow-up PR can replace the TARGET file with it as is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.core.domain import CandidateSource, Origin, Problem, source_hash


@dataclass(frozen=True)
class Base:
    """The implementation a transformation starts from."""

    label: str  # "reference" | "target"
    source: str
    class_name: str  # "Model" for the reference, "ModelNew" for a TARGET

    @property
    def parent_hash(self) -> str:
        return source_hash(self.source)


def bases_for(problem: Problem) -> list[Base]:
    """The reference always; the TARGET implementation when the problem declares one."""
    bases = [Base("reference", problem.source, "Model")]
    if problem.target is not None:
        bases.append(Base("target", problem.target.read_text(), "ModelNew"))
    return bases


def _with_torch_import(source: str) -> str:
    return source if re.search(r"^import torch\b", source, re.M) else "import torch\n" + source


def derived(base: Base, wrapper: str, detail: str, name: str, round_: int | None = None, **fields) -> CandidateSource:
    """`base`'s source followed by `wrapper`, filled in with the base's class, `detail` (the
    origin's words, also the wrapper's header) and `fields`."""
    source = _with_torch_import(base.source) + wrapper.format(base=base.class_name, detail=detail, **fields)
    return CandidateSource(
        name=name, source=source, origin=Origin("search", detail, round=round_, parent=base.parent_hash)
    )


def uses(source: str, *needles: str) -> bool:
    return any(n in source for n in needles)
