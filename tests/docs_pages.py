"""The documentation's pages and their fenced code blocks, for the tests that run them.

A block may be marked by a MyST comment on the line just before its fence:
``% doc-test: topology`` (a complete topology module, run with ``statestream
run``), ``% doc-test: pytest`` (a complete test module: its ``test_*``
functions are called), ``% doc-test: exec NAME`` (run by the test NAME of
tests/docs/test_docs_examples.py, which supplies what it needs) or
``% doc-test: tests/PATH.py`` (a test that reads this page and runs the block).
In the README the marker is an HTML comment: ``<!-- doc-test: topology -->``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

_OPEN = re.compile(r"^(`{3,})(.*)$")
# A MyST comment in the docs; an HTML comment in the README, which GitHub shows.
_MARKER = re.compile(r"^(?:% doc-test: (.+)|<!-- doc-test: (.+) -->)$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    code: str
    marker: str | None

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line} ({self.lang})"


def guide_pages() -> list[Path]:
    """The pages whose examples must run: getting started and every guide."""
    return [DOCS / "getting-started.md", *sorted((DOCS / "guides").glob("*.md"))]


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page`` in order (``{directive}`` fences are not code)."""
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        opened = _OPEN.match(lines[i])
        if opened is None:
            i += 1
            continue
        fence, info = opened.groups()
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == fence)
        marked = _MARKER.match(lines[i - 1].strip()) if i else None
        marker = (marked[1] or marked[2]).strip() if marked else None
        if not info.startswith("{"):
            code = "\n".join(lines[i + 1 : end]) + "\n"
            found.append(Block(page, i + 1, info.strip(), code, marker))
        i = end + 1
    return found


def section_code(page: Path, marker: str) -> str:
    """The code of the one block of ``page`` marked ``% doc-test: <marker>``."""
    found = [b.code for b in blocks(page) if b.marker == marker]
    assert len(found) == 1, f"{page} has {len(found)} blocks marked {marker!r}"
    return found[0]


def statestream_commands(pages: list[Path]) -> list[str]:
    """Each ``python3 -m statestream`` command of the pages' sh blocks, on one line."""
    commands = []
    for page in pages:
        for block in blocks(page):
            if block.lang != "sh":
                continue
            for line in block.code.replace("\\\n", " ").splitlines():
                if "python3 -m statestream " in line:
                    # "pip install ... && python3 -m statestream run ...": the run.
                    commands.append(" ".join(line.split("&&")[-1].split()))
    return commands
