"""The live web view of a run (``statestream run --ui``) and the topology graph it draws.

``graph``: a topology as nodes and edges (pure), and as DOT or Mermaid text.
``server``: the run's side of the live view: a publisher thread renders
``/metrics`` and ``/api/v1/topology`` about once a second and pushes them to
``httpd``, a server process of its own (standard library only) that serves the
page and those bodies while the run runs, so that no client costs the run's process.
"""
