"""How a tempering run mixed: the diagnostics and the kernel's progress-bar summary."""

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC

import numpyro_extras as nx
from numpyro_extras import targets
from numpyro_extras.tempering.chains import unreached_ends


def test_diagnostics(bimodal_run):
    diagnostics = nx.tempering_diagnostics(bimodal_run)
    assert diagnostics["fraction_near_base"].shape == (80,)
    assert np.all(diagnostics["round_trips"] >= 1)
    assert diagnostics["base_moment_check"].passed
    # the running counts in the state agree with the recomputed fractions
    mixing = bimodal_run.last_state.mixing
    np.testing.assert_allclose(
        np.asarray(mixing.num_near_base) / 1000, diagnostics["fraction_near_base"]
    )
    text = bimodal_run.sampler.get_diagnostics_str(
        jax.tree.map(lambda leaf: leaf[0], bimodal_run.last_state)
    )
    assert "beta=" in text and "round trips=" in text


def test_printed_diagnostics_show_each_chain_and_the_problems(bimodal_run):
    diagnostics = nx.tempering_diagnostics(bimodal_run)
    report = str(diagnostics)
    lines = report.splitlines()
    assert lines[0] == "Continuous tempering run"
    # 80 chains: the minimum, median and maximum over them
    assert lines[1].split() == ["min", "of", "80", "chains", "median", "max"]
    trips = next(line for line in lines if line.startswith("round trips"))
    counts = diagnostics.round_trips
    assert trips.split()[2:] == [f"{counts.min()}", f"{np.median(counts):g}", f"{counts.max()}"]
    check = next(line for line in lines if line.startswith("base moment check"))
    assert "passed" in check
    assert lines[-1] == "Problems: none found"
    flagged = diagnostics._replace(problems=("a chain never reached beta > 0.9",))
    assert str(flagged).splitlines()[-2:] == ["Problems:", "  - a chain never reached beta > 0.9"]


def test_unreached_ends_names_the_chains_and_the_end():
    beta = np.array([[0.05, 0.5, 0.95], [0.2, 0.5, 0.95], [0.05, 0.5, 0.8], [0.3, 0.4, 0.5]])
    assert unreached_ends(beta) == [
        "chains [1, 3] never reached beta < 0.1",
        "chains [2, 3] never reached beta > 0.9",
    ]
    assert unreached_ends(beta[:1]) == []


def test_a_run_too_short_for_its_posterior_draws_says_so(bimodal_log_z):
    # 2 chains x 40 draws cannot reach a bulk ESS of 100 in any coordinate.
    base = nx.GaussianBase(jnp.array([-1.6]), jnp.array([[np.sqrt(63.64)]]), jnp.asarray(1.5))
    mcmc = MCMC(
        nx.GibbsContinuousTempering(targets.bimodal_model, base=base),
        num_warmup=40,
        num_samples=40,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(0), bimodal_log_z)
    diagnostics = nx.tempering_diagnostics(mcmc)
    assert diagnostics.posterior_ess < 100
    assert any(
        problem.startswith("the posterior draws' effective sample size is only")
        for problem in diagnostics.problems
    )
