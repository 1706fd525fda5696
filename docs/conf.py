"""Sphinx configuration of statestream's documentation site (issue 36).

Build it with ``python3 -m sphinx -W --keep-going -b html docs docs/_build/html``
(``pip install -e '.[docs]'`` first; Graphviz's ``dot`` draws the pictures).
Warnings are errors in CI: a broken cross-reference (``nitpicky``), a page in
no toctree, a public name the reference does not document
(``_ext/statestream_docs.py``) each fail the build.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
# The checkout's package, not an installed copy; the site's own extension beside it.
sys.path[:0] = [str(ROOT), str(DOCS / "_ext")]
# autodoc reads signatures, annotations and docstrings from the Python sources: the
# compiled core's extension classes carry no annotations, and a checkout's build
# may be missing or stale. The API is the same on either core.
os.environ["STATESTREAM_CORE"] = "python"

project = "statestream"
author = "the statestream authors"
copyright = "the statestream authors"
release = version = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.graphviz",
    "sphinx.ext.intersphinx",
    "sphinx_click",
    "statestream_docs",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = "statestream"
html_static_path: list[str] = []

graphviz_output_format = "svg"

# Every cross-reference must resolve, or the build fails.
nitpicky = True
# Names of the standard library and of optional dependencies resolve through
# their own inventories only when online; these are the ones our signatures use
# that have no page here.
nitpick_ignore_regex = [
    # A public docstring may name a private class (a base, a helper's type): it
    # has no page, so it stays plain text; public names must all resolve.
    (r"py:.*", r"statestream(\.\w+)*\._\w+.*"),
    (r"py:.*", r"(os|abc|typing|collections|types|pathlib|datetime|enum|threading)\..*"),
    # Private names a public docstring or signature mentions by their short name:
    # helpers, a type variable, internal types (no page; plain text).
    (r"py:.*", r"_\w+|H|ComponentSpec|Origin|Settings|settings_of|size_cache|plan_ranges"),
    (r"py:.*", r"PARTITIONS_KEY|ExecutorCollector\..*"),
    (r"py:.*", r"(Path|PathLike)"),
    (r"py:.*", r"(Any|Callable|Iterator|Iterable|Mapping|Sequence|MutableMapping|Self|Final|Literal|TypeVar|T|K|V)"),
    (r"py:.*", r"(pyspark|redis|psycopg|pika|nats|click)(\..*)?"),
]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}

intersphinx_mapping: dict[str, tuple[str, str | None]] = {}
