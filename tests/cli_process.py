"""The ``statestream`` command run as a user runs it: ``python -m statestream`` in a
subprocess, unbuffered, its output captured as text."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["statestream"]


def statestream(
    *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``statestream ARGS`` in ``cwd`` and wait for it (``timeout`` seconds at most)."""
    return subprocess.run(
        [sys.executable, "-m", "statestream", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
