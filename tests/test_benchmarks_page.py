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
    assert (
        "['latency', 'coverage', 'scaling', 'scaling_replicas', 'scaling_datasets', "
        "'scaling_chains']" in completed.stdout
    )


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
