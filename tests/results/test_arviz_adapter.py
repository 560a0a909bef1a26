"""The ArviZ adapter gives the same numbers and groups under ArviZ 0.2x and 1.x: checked against
closed forms (the MCSE of independent draws, the Pareto shape of Pareto-tailed weights)."""

import math
import subprocess
import sys
import textwrap

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS
from scipy.stats import genpareto

from numpyro_extras.results import arviz_adapter


def test_ess_mcse_rhat_of_independent_draws():
    draws = np.random.default_rng(0).standard_normal((4, 2000))
    # Independent draws: ESS about their number, MCSE of the mean about 1 / sqrt(n).
    assert arviz_adapter.ess(draws) == pytest.approx(8000, rel=0.1)
    assert arviz_adapter.ess(draws, method="mean") == pytest.approx(8000, rel=0.1)
    assert arviz_adapter.mcse(draws) == pytest.approx(1 / math.sqrt(8000), rel=0.1)
    assert arviz_adapter.rhat(draws) == pytest.approx(1.0, abs=0.01)
    assert arviz_adapter.rhat(draws, method="split") == pytest.approx(1.0, abs=0.01)
    # A 1-D series is one chain.
    assert arviz_adapter.mcse(draws[0]) == arviz_adapter.mcse(draws[:1])
    assert arviz_adapter.ess(draws[0]) == arviz_adapter.ess(draws[:1])
    with pytest.raises(ValueError, match=r"shape \(draw,\) or \(chain, draw\)"):
        arviz_adapter.ess(draws[None])


def test_rhat_sees_chains_that_disagree():
    draws = np.random.default_rng(1).standard_normal((4, 1000)) + np.array([[0], [0], [0], [3]])
    assert arviz_adapter.rhat(draws) > 1.3


@pytest.mark.parametrize("shape", [0.3, 0.8])
def test_psis_pareto_shape_of_pareto_weights(shape):
    weights = genpareto(shape).rvs(size=20_000, random_state=2)
    log_weights = np.log(weights)
    smoothed, k = arviz_adapter.psis_log_weights(log_weights)
    assert k == pytest.approx(shape, abs=0.1)
    # Smoothing only replaces the upper tail, on the scale of the weights given.
    below_tail = log_weights < np.quantile(log_weights, 0.5)
    np.testing.assert_allclose(smoothed[below_tail], log_weights[below_tail], atol=1e-9)
    assert np.max(smoothed) <= np.max(log_weights) + 1e-9


def test_from_draws_and_added_sample_stats():
    idata = arviz_adapter.from_draws(
        {"x": np.zeros((2, 50, 3))}, {"diverging": np.zeros((2, 50), bool)}
    )
    arviz_adapter.add_sample_stats(idata, {"beta": np.ones((2, 50))})
    assert idata.posterior["x"].shape == (2, 50, 3)
    assert idata.sample_stats["beta"].dims == ("chain", "draw")
    assert float(idata.sample_stats["beta"].sum()) == 100.0
    assert "sample_stats" in idata
    assert "sample_stats" not in arviz_adapter.from_draws({"x": np.zeros((2, 50))})


def test_from_numpyro_keeps_the_log_likelihood():
    def model(y):
        mean = numpyro.sample("mean", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Normal(mean, 1.0), obs=y)

    mcmc = MCMC(NUTS(model), num_warmup=50, num_samples=50, num_chains=2, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), np.arange(5.0))
    idata = arviz_adapter.from_numpyro(mcmc)
    assert idata.log_likelihood["y"].shape == (2, 50, 5)
    assert idata.posterior["mean"].shape == (2, 50)


def test_from_numpyro_after_arviz_is_imported_first():
    """ArviZ 1.x imports NumPyro lazily; imported before numpyro it leaves numpyro.infer's
    submodules off its attributes, which az.from_numpyro reads. A fresh interpreter with that
    import order (alphabetical, so common) exports a NUTS run, ours and the user's own call."""
    script = textwrap.dedent(
        """
        import sys

        import arviz as az
        import jax
        from numpyro.infer import MCMC, NUTS

        lost = not hasattr(sys.modules["numpyro.infer"], "initialization")
        import numpyro_extras.results.arviz_adapter
        import numpyro_extras as nx
        import numpyro.distributions as dist
        from numpyro import sample

        def model():
            sample("x", dist.Normal(0.0, 1.0))

        mcmc = MCMC(NUTS(model), num_warmup=20, num_samples=20, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0))
        assert az.from_numpyro(mcmc).posterior["x"].shape == (1, 20)
        assert nx.results.arviz_adapter.from_numpyro(mcmc).posterior["x"].shape == (1, 20)
        print("lost" if lost else "kept", "exported")
        """
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip().endswith("exported")
