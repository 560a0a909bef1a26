"""Every test the README's command leaves out runs in a step of CI: each marker that the
suite's ``addopts`` deselects is selected by a ``pytest -m`` line of ``.ci/run``."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def deselected_markers():
    """The markers in ``not ...`` clauses of the suite's ``addopts``."""
    pytest_config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    return re.findall(r"not (\w+)", pytest_config["ini_options"]["addopts"])


def test_every_deselected_marker_has_a_ci_step():
    markers = deselected_markers()
    assert {"slow", "slow_example", "several_processes"} <= set(markers)
    ci_run = (ROOT / ".ci/run").read_text()
    for marker in markers:
        assert re.search(rf"-m pytest .*-m {marker}( |$)", ci_run, re.M), marker


def test_every_marker_is_registered():
    pytest_config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    registered = {line.split(":")[0] for line in pytest_config["ini_options"]["markers"]}
    assert set(deselected_markers()) <= registered
