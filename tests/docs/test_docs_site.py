"""The documentation site builds clean with warnings as errors (a broken cross-reference,
a page in no toctree, a public name or config key the reference lacks each fail it);
the built reference holds every public name and config key; and the getting-started
and concepts pages, opened in headless Chromium, show their pictures and have no
broken local link. One build (about 20 s) serves every test here."""

from __future__ import annotations

import functools
import http.server
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml
from docs_pages import DOCS, ROOT
from ui.test_ui_browser import chromium

import statestream
import statestream.connectors
import statestream.provider

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docs")]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as CI and the README build it: ``sphinx -W --keep-going``."""
    out = tmp_path_factory.mktemp("docs") / "html"
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(out.parent / "doctrees"), str(DOCS), str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr
    return out


def _ids(page: Path) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', page.read_text()))


def test_the_reference_documents_every_public_name_and_config_key(site: Path) -> None:
    api = _ids(site / "reference" / "api.html")
    assert {f"statestream.{n}" for n in statestream.__all__} <= api
    connectors = _ids(site / "reference" / "connectors.html")
    assert {f"statestream.connectors.{n}" for n in statestream.connectors.__all__} <= connectors
    provider = _ids(site / "reference" / "provider.html") | api
    missing = [
        n
        for n in statestream.provider.__all__
        if f"statestream.provider.{n}" not in provider and f"statestream.{n}" not in api
    ]
    assert missing == []
    keys = yaml.safe_load((ROOT / "statestream" / "defaults.yaml").read_text())
    config = _ids(site / "reference" / "config.html")
    assert {f"confval-{key}" for key in keys} <= config
    cli = _ids(site / "reference" / "cli.html")
    assert {"statestream-run", "statestream-state-clear", "statestream-deadletter-replay"} <= cli


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on a free port (a browser keeps file:// SVGs from scripts)."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


# Every picture of a page: an <img> (its natural width once loaded) or the <object>
# sphinx.ext.graphviz puts an SVG in (the width its document's <svg> is drawn at).
_PICTURES = """
const done = [...document.images].map(i => i.complete ? i.naturalWidth : -1);
for (const o of document.querySelectorAll('object[type="image/svg+xml"]')) {
  const svg = o.contentDocument && o.contentDocument.querySelector('svg');
  done.push(svg ? svg.getBoundingClientRect().width : -1);
}
return done;
"""


@pytest.mark.parametrize(("page", "pictures"), [("getting-started.html", 1), ("concepts.html", 4)])
def test_a_page_in_chromium_shows_its_pictures_and_has_no_broken_link(
    site: Path, served: str, tmp_path: Path, page: str, pictures: int
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = chromium(tmp_path / "chromium-profile")
    try:
        driver.get(served + page)
        WebDriverWait(driver, 30).until(
            lambda d: d.execute_script("return document.readyState") == "complete"
        )
        widths = WebDriverWait(driver, 30).until(
            lambda d: (w := d.execute_script(_PICTURES)) and all(x > 0 for x in w) and w
        )
        hrefs = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "a[href]")]
        # The browser asks for /favicon.ico on its own; the site has none.
        errors = [
            e
            for e in driver.get_log("browser")
            if e["level"] == "SEVERE" and "/favicon.ico " not in e["message"]
        ]
    finally:
        driver.quit()
    assert len(widths) >= pictures, widths
    assert errors == []
    local = [h for h in hrefs if h.startswith(served)]
    assert local, hrefs
    for href in local:
        parts = urlsplit(href)
        target = site / unquote(parts.path).removeprefix("/")
        if target.is_dir():
            target /= "index.html"
        assert target.is_file(), f"{page}: broken link {href}"
        if parts.fragment and target.suffix == ".html":
            assert parts.fragment in _ids(target), f"{page}: no #{parts.fragment} in {target.name}"
