"""The search's replacement kernels (bot/propose/kernels/) as one importable module, for the
scripts that look at them from outside a candidate: the sm_90 build check and the H200 probe.

Triton reads a kernel's source through inspect, so text run through exec() cannot define one:
the files are joined as a candidate joins them (replace.py first) and imported from a real file.
The bot's own process never does this; a candidate's worker does it for itself.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent


def import_kernels(*files: str) -> ModuleType:
    """replace.py and then `files` (names in bot/propose/kernels/), as one fresh module."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from bot.propose.paths import REPLACING, kernel_source

    stem = "kernel_bot_" + "_".join(Path(f).stem for f in files)
    path = Path(tempfile.mkdtemp(prefix="kernel-bot-kernels-")) / f"{stem}.py"
    path.write_text(REPLACING + "".join(kernel_source(f) for f in files))
    spec = importlib.util.spec_from_file_location(stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
