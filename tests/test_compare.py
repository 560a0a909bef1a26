"""nx.compare and nx.plot_compare: the table against hand-computed values, the posterior
probabilities' interval against its nominal coverage, runs of a kernel and bad input."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC, NUTS
from scipy.special import softmax

import numpyro_extras as nx
from numpyro_extras import targets

EVIDENCES = {
    "a": nx.Evidence(-12.0, 0.2),
    "b": nx.Evidence(-10.0, 0.1),
    "c": nx.Evidence(-11.0, 0.3, problems=("few round trips", "chains disagree")),
}


def test_table_against_hand_computed_values():
    table = nx.compare(EVIDENCES)
    assert list(table.index) == ["b", "c", "a"]
    assert list(table["rank"]) == [0, 1, 2]
    np.testing.assert_allclose(table["log_z"], [-10.0, -11.0, -12.0])
    np.testing.assert_allclose(table["stderr"], [0.1, 0.3, 0.2])
    np.testing.assert_allclose(table["log_bf"], [0.0, -1.0, -2.0])
    np.testing.assert_allclose(
        table["log_bf_stderr"], [0.0, math.hypot(0.3, 0.1), math.hypot(0.2, 0.1)]
    )
    np.testing.assert_allclose(table["prior_prob"], [1 / 3] * 3)
    np.testing.assert_allclose(table["posterior_prob"], softmax([-10.0, -11.0, -12.0]))
    assert table["posterior_prob"].sum() == pytest.approx(1.0, abs=1e-12)
    assert list(table["warning"]) == ["", "few round trips; chains disagree", ""]
    assert np.all(table["posterior_prob_lower"] < table["posterior_prob"])
    assert np.all(table["posterior_prob"] < table["posterior_prob_upper"])
    assert table.attrs["ci_prob"] == 0.95


def test_prior_probabilities_weigh_the_evidence():
    table = nx.compare(EVIDENCES, prior_probs={"a": 6.0, "b": 1.0, "c": 3.0})
    np.testing.assert_allclose(table.loc[["a", "b", "c"], "prior_prob"], [0.6, 0.1, 0.3])
    expected = softmax(np.array([-12.0, -10.0, -11.0]) + np.log([0.6, 0.1, 0.3]))
    np.testing.assert_allclose(table.loc[["a", "b", "c"], "posterior_prob"], expected)
    assert table["posterior_prob"].sum() == pytest.approx(1.0, abs=1e-12)


def test_an_unknown_error_leaves_every_interval_out():
    table = nx.compare({"x": nx.Evidence(0.0, float("nan")), "y": nx.Evidence(-1.0, 0.1)})
    assert table[["posterior_prob_lower", "posterior_prob_upper"]].isna().all(axis=None)
    assert "no finite standard error" in table.loc["x", "warning"]
    assert table.loc["y", "warning"] == ""
    np.testing.assert_allclose(table["posterior_prob"], softmax([0.0, -1.0]))


def test_exact_estimates_give_a_point_interval():
    table = nx.compare({"x": nx.Evidence(0.0, 0.0), "y": nx.Evidence(-1.0, 0.0)})
    np.testing.assert_allclose(table["posterior_prob_lower"], table["posterior_prob"])
    np.testing.assert_allclose(table["posterior_prob_upper"], table["posterior_prob"])


@pytest.mark.parametrize("true_log_z", [(0.0, -0.5), (0.0, -0.7, -1.5)])
def test_interval_covers_the_true_probabilities_at_its_level(true_log_z):
    """Estimates drawn around the true log evidences with their stderrs: the 90% interval holds
    the true posterior probability in 90% of the runs (exactly so for two models, where the
    probability is monotone in the one difference)."""
    true_log_z = np.array(true_log_z)
    stderr = np.array([0.3, 0.5, 0.4][: true_log_z.size])
    truth = softmax(true_log_z)
    rng = np.random.default_rng(0)
    num_runs = 400
    covered = np.zeros((num_runs, true_log_z.size), bool)
    for run in range(num_runs):
        estimates = true_log_z + stderr * rng.standard_normal(true_log_z.size)
        pairs = zip(estimates, stderr, strict=True)
        models = {f"m{i}": nx.Evidence(z, s) for i, (z, s) in enumerate(pairs)}
        table = nx.compare(models, ci_prob=0.9, num_draws=4000, seed=run).loc[list(models)]
        covered[run] = (table["posterior_prob_lower"] <= truth) & (
            truth <= table["posterior_prob_upper"]
        )
    coverage = covered.mean(axis=0)
    tolerance = 4 * math.sqrt(0.9 * 0.1 / num_runs)
    assert np.all(np.abs(coverage - 0.9) < tolerance), coverage


@pytest.fixture(scope="module")
def scaled_runs():
    """Gibbs tempering on the bimodal target scaled to log Z = 2 and to log Z = 3."""
    base = nx.GaussianBase(jnp.array([-1.6]), jnp.array([[np.sqrt(63.64)]]), jnp.asarray(1.5))
    runs = {}
    for name, log_scale in (("two", 2.0), ("three", 3.0)):
        mcmc = MCMC(
            nx.GibbsContinuousTempering(targets.bimodal_model, base=base),
            num_warmup=300,
            num_samples=1000,
            num_chains=8,
            chain_method="vectorized",
            progress_bar=False,
        )
        mcmc.run(jax.random.PRNGKey(3), log_scale)
        runs[name] = mcmc
    return runs


def test_runs_of_a_kernel_give_the_exact_bayes_factor(scaled_runs):
    table = nx.compare({**scaled_runs, "ais": nx.Evidence(2.5, 0.05)})
    assert table.index[0] == "three"
    log_bf = table.loc["two", "log_bf"]
    stderr = table.loc["two", "log_bf_stderr"]
    assert 0 < stderr < 0.15
    assert abs(log_bf - (-1.0)) < 4 * stderr
    for name, mcmc in scaled_runs.items():
        evidence = nx.log_marginal_likelihood(mcmc, warn=False)
        assert table.loc[name, "log_z"] == evidence.log_z
        assert table.loc[name, "warning"] == "; ".join(evidence.problems)


def test_plot_compare_draws_every_model(scaled_runs):
    table = nx.compare({**scaled_runs, "worse": nx.Evidence(0.0, 0.1, problems=("odd",))})
    bf_axis, prob_axis = nx.plot_compare(table)
    labels = [label.get_text() for label in bf_axis.get_yticklabels()]
    by_height = dict(zip(bf_axis.get_yticks(), labels, strict=True))
    assert [by_height[height] for height in sorted(by_height, reverse=True)] == list(table.index)
    assert len(prob_axis.containers) == len(table)


def test_bad_input_names_the_problem():
    nuts = MCMC(NUTS(targets.bimodal_model), num_warmup=5, num_samples=5, progress_bar=False)
    nuts.run(jax.random.PRNGKey(0), 2.0)
    # A run without a log Z of its own is bridged, which needs more draws than these.
    with pytest.raises(ValueError, match="model 'nuts': .*at least 16 draws per chain"):
        nx.compare({"nuts": nuts, "b": EVIDENCES["b"]})
    with pytest.raises(TypeError, match="model 'b' must be a finished"):
        nx.compare({"b": -10.0})
    with pytest.raises(TypeError, match="non-empty dict"):
        nx.compare([EVIDENCES["a"]])
    with pytest.raises(TypeError, match="non-empty dict"):
        nx.compare({})
    with pytest.raises(ValueError, match="must name exactly the models"):
        nx.compare(EVIDENCES, prior_probs={"a": 1.0})
    with pytest.raises(ValueError, match=r"prior_probs\['a'\] must be a positive number"):
        nx.compare(EVIDENCES, prior_probs={"a": -1.0, "b": 1.0, "c": 1.0})
    with pytest.raises(ValueError, match="ci_prob must be a probability"):
        nx.compare(EVIDENCES, ci_prob=1.5)
    with pytest.raises(ValueError, match=r"log Z of \['x'\] is not a finite number"):
        nx.compare({"x": nx.Evidence(float("nan"), 0.1)})
    with pytest.raises(TypeError, match="expected a table of nx.compare"):
        nx.plot_compare(EVIDENCES)
