#!/usr/bin/env bash
# Mutation testing of the protocol modules against the fast tests.
#
#   tools/mutate.sh            run (results of unchanged code are reused from mutants/)
#   tools/mutate.sh --fresh    forget earlier results and mutate everything again
#
# The modules, the tests and the per-test timeout are in [tool.mutmut] of
# pyproject.toml: _acker, _checkpoint, _executors, _exactly_once, _state,
# _stateful and _rotating, against tests/unit and tests/conformance without the
# slow and spark markers (pytest-timeout kills a mutant that hangs). mutmut
# copies the code into mutants/ (git-ignored) and mutates it there; the working
# tree is not touched. Prints the surviving mutants at the end: see one with
# `python3 -m mutmut show <name>`. MUTATE_JOBS sets the parallelism (default:
# the CPU count). Needs the dev extra (mutmut 3). Not run by CI.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--fresh" ]]; then
    rm -rf mutants
    shift
fi
jobs="${MUTATE_JOBS:-$(nproc)}"
start=$(date +%s)
python3 -m mutmut run --max-children "$jobs" "$@" | tr '\r' '\n' | grep -v "^\s*$" | tail -n 2
echo "mutation run took $(( $(date +%s) - start )) s"
echo "mutants by outcome:"
python3 -m mutmut results --all true | awk -F': ' '{print $NF}' | sort | uniq -c
echo "not killed (docs/development.md lists the equivalent ones):"
python3 -m mutmut results
