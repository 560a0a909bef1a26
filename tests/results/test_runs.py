"""The run checks shared by every family."""

import warnings
from types import SimpleNamespace

import numpy as np

from numpyro_extras.results.runs import (
    convergence_problems,
    posterior_convergence,
    run_report,
)


def _finished_run(samples):
    return SimpleNamespace(get_samples=lambda group_by_chain: samples)


def test_a_binary_site_split_evenly_needs_no_warning_and_hides_no_rhat():
    rng = np.random.default_rng(0)
    # A 0/1 site whose median sits on a value folds to a constant tail (rank R-hat undefined),
    # beside a site whose chains disagree: the largest R-hat must still be the second one's.
    balanced = np.tile(np.repeat([0.0, 1.0], 500)[rng.permutation(1000)], (4, 1))
    stuck = np.repeat([[0.0], [0.0], [1.0], [1.0]], 1000, axis=1) + rng.normal(0, 0.1, (4, 1000))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ess, rhat = posterior_convergence(_finished_run({"a": balanced, "b": stuck}))
    assert np.isfinite(ess)
    assert rhat > 1.5


def test_a_run_report_gives_each_chain_a_column_and_lists_the_problems():
    report = run_report(
        "A run",
        [("round trips", [12, 9], "d"), ("log Z", [1.23456, float("nan")], ".3f")],
        [("posterior draws", "min ESS 812")],
        ("chain 1 never reached the posterior",),
    )
    assert report.splitlines() == [
        "A run",
        "                 chain 0  chain 1",
        "round trips           12        9",
        "log Z              1.235        -",
        "posterior draws  min ESS 812",
        "Problems:",
        "  - chain 1 never reached the posterior",
    ]
    assert run_report("A run", [], [], ()).splitlines() == ["A run", "Problems: none found"]


def test_draws_too_few_or_split_between_chains_are_reported():
    assert convergence_problems(100.0, 1.05) == []
    assert convergence_problems(float("nan"), float("nan")) == []
    assert convergence_problems(99.4, 1.0) == [
        "the posterior draws' effective sample size is only 99"
    ]
    assert convergence_problems(400.0, 1.2) == [
        "the chains' posterior draws disagree (R-hat 1.20 > 1.05)"
    ]
