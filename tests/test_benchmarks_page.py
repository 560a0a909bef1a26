"""docs/benchmarks.md: the tables generated from stored results match those results."""

import subprocess
import sys
from pathlib import Path

RENDER = Path(__file__).resolve().parent.parent / "benchmarks" / "render_page.py"


def test_generated_tables_match_the_stored_results():
    completed = subprocess.run(
        [sys.executable, str(RENDER), "--check"], capture_output=True, text=True, timeout=300
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    for name in ("latency", "coverage", "scaling_chains", "report/tempering_benchmark"):
        assert f"'{name}'" in completed.stdout


def test_every_stored_report_is_on_the_page():
    page = (RENDER.parent.parent / "docs" / "benchmarks.md").read_text()
    for report in (RENDER.parent / "results").glob("*.md"):
        assert f"<!-- generated: report/{report.stem} -->" in page, report.name


def test_a_report_block_sits_one_level_below_its_heading(tmp_path, monkeypatch):
    sys.path.insert(0, str(RENDER.parent))
    try:
        import render_page
    finally:
        sys.path.remove(str(RENDER.parent))
    monkeypatch.setattr(render_page, "RESULTS", tmp_path)
    (tmp_path / "run.md").write_text(
        "# Title of the run\n\n## Environment\n\n- Command: `x`\n\n### Table\n\n"
        "```bash\n# a comment, not a heading\n```\n| a |\n|---|\n| 1 |\n"
    )
    page = (
        "# Page\n\n## Section\n\n```bash\n# not a heading\n```\n\n### Results\n\n"
        "<!-- generated: report/run -->\nstale\n<!-- end generated: report/run -->\n\n"
        "<!-- generated: report/run -->\n<!-- end generated: report/run -->\n"
    )
    rendered = render_page.render(page)
    # Both blocks under "### Results", the second not under the first block's last heading.
    assert rendered.count("#### Environment\n") == 2 and rendered.count("##### Table\n") == 2
    assert "Title of the run" not in rendered and "stale" not in rendered
    assert "# a comment, not a heading" in rendered
    assert render_page.render(rendered) == rendered


def test_a_stale_table_is_caught(tmp_path):
    page = tmp_path / "benchmarks.md"
    text = (RENDER.parent.parent / "docs" / "benchmarks.md").read_text()
    marker = "<!-- end generated: coverage -->"
    page.write_text(text.replace(marker, "| a row the results do not hold |\n" + marker))
    completed = subprocess.run(
        [sys.executable, str(RENDER), "--check", "--page", str(page)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 1 and "differ" in completed.stdout
    subprocess.run([sys.executable, str(RENDER), "--page", str(page)], check=True, timeout=300)
    assert page.read_text() == text
