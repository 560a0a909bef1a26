"""Rewrite the tables of ``docs/benchmarks.md`` from the results the benchmark scripts stored.

A table that comes from stored results sits in the page between two markers,
``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``; this script replaces what is
between them with the table its script renders from ``benchmarks/results/`` and the run's
environment stored beside it. A block named ``report/NAME`` holds the Markdown report a script
wrote with ``--output benchmarks/results/NAME.md`` (its environment section included), its
headings moved one level below the page heading the block sits under. The prose around the
markers (how the run was made, its reading) is the page's own. ``--check`` changes nothing and
exits with status 1 when a table on the page differs from its results (the test suite runs it,
so the page cannot drift from them).

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
    r"(<!-- generated: (?P<name>[a-z_/]+) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)",
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


REPORT_PREFIX = "report/"
HEADING = re.compile(r"^(#{1,6}) ")
FENCE = "```"


def _heading_levels(lines):
    """The Markdown heading level of each line (0 for text and for lines in code fences)."""
    levels, in_fence = [], False
    for line in lines:
        if line.startswith(FENCE):
            in_fence = not in_fence
        heading = None if in_fence else HEADING.match(line)
        levels.append(len(heading[1]) if heading else 0)
    return levels


def enclosing_level(page_text: str, position: int) -> int:
    """The level of the last heading of the page's own text before ``position`` (0 if none);
    headings inside generated blocks do not count, so rendering twice changes nothing."""
    own_text = BLOCK.sub("", page_text[:position])
    levels = [level for level in _heading_levels(own_text.splitlines()) if level]
    return levels[-1] if levels else 0


def report_section(name: str, parent_level: int) -> str:
    """The stored report ``results/NAME.md`` with its top headings one level below the page's.

    A report's own title (a level-1 heading) is dropped: the page's heading names the section.
    """
    lines = (RESULTS / f"{name}.md").read_text().strip().splitlines()
    levels = _heading_levels(lines)
    if levels and levels[0] == 1:
        lines, levels = lines[1:], levels[1:]
        while lines and not lines[0].strip():
            lines, levels = lines[1:], levels[1:]
    present = [level for level in levels if level]
    shift = parent_level + 1 - min(present) if present else 0
    return "\n".join(
        "#" * min(level + shift, 6) + line[level:] if level else line
        for line, level in zip(lines, levels, strict=True)
    )


def render(page_text: str) -> str:
    """``page_text`` with every generated block rendered anew from the stored results.

    :raises KeyError: for a block whose name no section renders.
    """

    def replace(match):
        name = match["name"]
        if name.startswith(REPORT_PREFIX):
            parent_level = enclosing_level(page_text, match.start())
            body = report_section(name[len(REPORT_PREFIX) :], parent_level)
        else:
            body = SECTIONS[name]()
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
