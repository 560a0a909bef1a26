"""Rewrite the tables of ``docs/benchmarks.md`` from the results the benchmark scripts stored.

A table that comes from stored results sits in the page between two markers,
``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``; this script replaces what is
between them with the table its script renders from ``benchmarks/results/`` and the run's
environment stored beside it. The prose around the markers (how the run was made, its reading)
is the page's own. ``--check`` changes nothing and exits with status 1 when a table on the page
differs from its results (the test suite runs it, so the page cannot drift from them).

Usage::

    python benchmarks/render_page.py            # rewrite docs/benchmarks.md
    python benchmarks/render_page.py --check    # exit 1 if the page is stale
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAGE = HERE.parent / "docs" / "benchmarks.md"
RESULTS = HERE / "results"
BLOCK = re.compile(
    r"(<!-- generated: (?P<name>[a-z_]+) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)",
    re.DOTALL,
)


def _environment_sentence(environment):
    return (
        f"Run at commit {environment['commit']} ({environment['minutes']} minutes; "
        f"{environment['machine']}; {environment['versions']}):\n\n"
        f"```bash\n{environment['command']}\n```"
    )


def latency_section():
    """The first-call table of ``latency_benchmark.py`` from ``results/latency.json``."""
    from latency_benchmark import _table

    stored = json.loads((RESULTS / "latency.json").read_text())
    return f"{_table(stored['records'])}\n\n{_environment_sentence(stored['environment'])}"


def coverage_section():
    """The calibration table of ``coverage_benchmark.py`` from ``results/coverage.jsonl``."""
    from common import markdown_table, read_runs
    from coverage_benchmark import HEADER, coverage_rows

    return markdown_table(HEADER, coverage_rows(read_runs(RESULTS / "coverage.jsonl")))


def _scaling_section(workload):
    """The cost of a workload of ``scaling_benchmark.py`` against its size and the devices."""
    from scaling_benchmark import RESULTS as SCALING_RESULTS
    from scaling_benchmark import scaling_table

    stored = json.loads(SCALING_RESULTS[workload].read_text())
    table = scaling_table(stored["records"], workload)
    return f"{table}\n\n{_environment_sentence(stored['environment'])}"


SECTIONS = {
    "latency": latency_section,
    "coverage": coverage_section,
    "scaling": lambda: _scaling_section("particles"),
    "scaling_replicas": lambda: _scaling_section("replicas"),
    "scaling_datasets": lambda: _scaling_section("datasets"),
    "scaling_chains": lambda: _scaling_section("chains"),
}


def render(page_text: str) -> str:
    """``page_text`` with every generated block rendered anew from the stored results.

    :raises KeyError: for a block whose name no section renders.
    """

    def replace(match):
        body = SECTIONS[match["name"]]()
        return f"{match[1]}{body}\n{match[4]}"

    return BLOCK.sub(replace, page_text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    parser.add_argument("--page", default=str(PAGE), help="the page to render")
    arguments = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    page = Path(arguments.page)
    text = page.read_text()
    names = [match["name"] for match in BLOCK.finditer(text)]
    rendered = render(text)
    if arguments.check:
        if rendered != text:
            print(f"{page}: generated tables differ from benchmarks/results; run {__file__}")
            return 1
        print(f"{page}: {len(names)} generated tables match benchmarks/results ({names})")
        return 0
    page.write_text(rendered)
    print(f"{page}: rendered {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
