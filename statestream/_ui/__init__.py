"""The live web view of a run (``statestream run --ui``) and the topology graph it draws.

``graph``: a topology as nodes and edges (pure), and as DOT or Mermaid text.
``server``: the HTTP server (standard library, a daemon thread) that serves the
page, ``/metrics`` and ``/api/v1/topology`` while a run runs, from bodies a
publisher thread renders about once a second; request threads only read them.
"""
