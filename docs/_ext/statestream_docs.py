"""Sphinx extension of statestream's site: reference pages generated from the code, checked.

The two directives write MyST Markdown, for the site's .md pages.
- ``{statestream-topology} examples/wordcount.py`` draws a topology file's
  graph with Graphviz, from the same dot the CLI and the live view use.

- ``{statestream-config-keys}`` renders every config key of the typed schema
  (:func:`statestream._settings.config_keys`: name, type, default, meaning, the
  note on Storm's key, the environment variable), each a ``confval`` target
  that the guides link to with ``{confval}`topology.workers```. The schema is
  what ``defaults.yaml`` is tested against, so the page cannot drift from it.
- ``{statestream-errors}`` renders the error hierarchy: the tree drawn in the
  docstring of ``statestream/_errors.py`` and one line per error class.
- At the end of reading, every public name (``statestream.__all__``,
  ``statestream.connectors.__all__``, ``statestream.provider.__all__``) and
  every key of ``defaults.yaml`` must have been documented somewhere: a missing
  one is a warning, which ``-W`` makes a failed build.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import yaml
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
# The public modules whose __all__ the reference must cover, and where a name may
# be documented: a name re-exported from statestream is documented there once.
PUBLIC_MODULES = ("statestream", "statestream.connectors", "statestream.provider")


def _yaml_value(value: object) -> str:
    dumped: str = yaml.safe_dump(value, default_flow_style=True)
    return dumped.removesuffix("\n...\n").strip()


class ConfigKeysDirective(SphinxDirective):
    """Every config key of the typed schema, in defaults.yaml's order."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        from statestream._settings import config_keys

        lines: list[str] = []
        for key in config_keys():
            lines += [f"::::{{confval}} {key.name}", key.doc, ""]
            if key.storm is not None:
                lines += [f"*Storm*: {key.storm}", ""]
            lines += [
                f"- type: {key.type}",
                f"- default: `{_yaml_value(key.default)}`",
                f"- environment: `{key.env_var}`",
                "::::",
                "",
            ]
        self.env.note_dependency(str(ROOT / "statestream" / "_settings.py"))
        return self._parse(lines)

    def _parse(self, lines: list[str]) -> list[nodes.Node]:
        # The lines are MyST Markdown: these directives are used in .md pages,
        # whose parser the nested parse runs.
        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, "<statestream-docs>"), container)
        return container.children


class ErrorsDirective(ConfigKeysDirective):
    """The error hierarchy: the tree of ``statestream/_errors.py``, then each class's summary."""

    def run(self) -> list[nodes.Node]:
        import statestream
        from statestream import _errors

        doc = inspect.getdoc(_errors) or ""
        tree = doc.split("::", 1)[1].split("\n\n")[1]
        lines = ["```text", *tree.splitlines(), "```", ""]
        for name in sorted(_errors.__all__):
            cls = getattr(_errors, name)
            where = "statestream" if name in statestream.__all__ else cls.__module__
            summary = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
            lines += [f"- {{py:class}}`{where}.{name}`: {summary}"]
        self.env.note_dependency(str(ROOT / "statestream" / "_errors.py"))
        return self._parse(lines)


class TopologyDirective(SphinxDirective):
    """The graph of a topology file of the repo, as ``statestream topology FILE --format dot``
    prints it and the live view draws it: the picture follows the code."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        from sphinx.ext.graphviz import graphviz

        from statestream import load_topology
        from statestream._ui.graph import to_dot, topology_graph

        path = ROOT / self.arguments[0]
        self.env.note_dependency(str(path))
        topology = load_topology(str(path))
        node = graphviz()
        node["code"] = to_dot(topology_graph(topology))
        node["options"] = {"docname": self.env.current_document.docname}
        node["alt"] = f"the topology of {self.arguments[0]}"
        return [node]


def _documented(env: BuildEnvironment) -> set[str]:
    py = env.get_domain("py")
    return {name for name, *_ in py.get_objects()}


def check_coverage(app: Sphinx, env: BuildEnvironment) -> None:
    """Warn for every public name or config key that no page documents."""
    import importlib

    documented = _documented(env)
    for modname in PUBLIC_MODULES:
        module = importlib.import_module(modname)
        for name in module.__all__:
            if f"{modname}.{name}" not in documented and f"statestream.{name}" not in documented:
                logger.warning(
                    "public name %s.%s is not documented in the reference: add it to "
                    "docs/reference/ (automodule)", modname, name, type="statestream", subtype="api")
    std = env.get_domain("std")
    confvals = {name for name, _, kind, *_ in std.get_objects() if kind == "confval"}
    keys = yaml.safe_load((ROOT / "statestream" / "defaults.yaml").read_text())
    for key in sorted(set(keys) - confvals):
        logger.warning("config key %s of defaults.yaml is not in the reference: "
                       "docs/reference/config.md renders config_keys()", key,
                       type="statestream", subtype="config")


def _in_bases(modname: str, clsname: str, target: str, documented: set[str]) -> list[str]:
    import importlib

    try:
        cls = importlib.import_module(modname)
        for part in clsname.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError):
        return []
    return [f"{public}.{base.__name__}.{target}" for base in inspect.getmro(cls)
            for public in (*PUBLIC_MODULES, "statestream.testing")
            if f"{public}.{base.__name__}.{target}" in documented]


def resolve_reexported(app: Sphinx, env: BuildEnvironment, node: Any, contnode: Any) -> Any:
    """A docstring's short name (``ConfigError`` in ``statestream.provider``) to its page.

    Private modules' docstrings name what they export by its short name; the
    reference documents it once, under the public module it is exported from.
    Only a public module's documented name resolves this way: anything else
    still warns.
    """
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].removeprefix("~").removeprefix(".")
    documented = _documented(env)
    found = [f"{public}.{target}" for public in (*PUBLIC_MODULES, "statestream.testing")
             if f"{public}.{target}" in documented]
    if not found and node.get("py:class"):
        # A method or attribute of the class or one of its bases, named alone
        # (``dead_lettered`` in a spout's docstring): where the reference documents it.
        found = _in_bases(node["py:module"], node["py:class"], target, documented)[:1]
    if not found:
        # A method or attribute named alone (``dead_lettered`` in a subclass's
        # docstring): the one public object of that name, if there is one.
        found = [name for name in documented
                 if name.endswith(f".{target}") and "._" not in name
                 and name.count(".") == target.count(".") + 2]
    if len(set(found)) != 1:
        return None
    new = node.deepcopy()
    new["reftarget"] = found[0]
    py = env.get_domain("py")
    return py.resolve_xref(env, node["refdoc"], app.builder, node["reftype"],
                           found[0], new, contnode)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("missing-reference", resolve_reexported)
    app.add_object_type("confval", "confval", objname="configuration key",
                        indextemplate="pair: %s; configuration key")
    app.add_directive("statestream-config-keys", ConfigKeysDirective)
    app.add_directive("statestream-errors", ErrorsDirective)
    app.add_directive("statestream-topology", TopologyDirective)
    app.connect("env-check-consistency", check_coverage)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
