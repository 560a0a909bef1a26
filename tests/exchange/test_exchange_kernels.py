"""nx.ReplicaExchange on models with closed-form answers, as a NumPyro user runs it."""

import warnings

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from arviz_checks import loo_elpd
from exchange_targets import (
    BIMODAL_LOG_Z,
    CONJUGATE_DATA,
    CONJUGATE_LOG_Z,
    CONJUGATE_POSTERIOR_MEAN,
    LEFT_WEIGHT,
    bimodal_likelihood_model,
    conjugate_model,
    run,
)
from numpyro.infer import HMC, NUTS, Gibbs
from numpyro.infer.gibbs import discrete_latent_sites

import numpyro_extras as nx
from numpyro_extras.targets import (
    linear_regression_log_evidence,
    linear_regression_model,
    make_linear_regression_data,
)


def _assert_log_z(evidence, truth, max_stderr):
    assert 0 < evidence.stderr < max_stderr
    assert abs(evidence.log_z - truth) < 4 * evidence.stderr


def test_stepping_stone_and_posterior_on_a_conjugate_model(conjugate_run):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a good run is quiet
        evidence = nx.log_marginal_likelihood(conjugate_run)
    _assert_log_z(evidence, CONJUGATE_LOG_Z, max_stderr=0.1)
    diagnostics = nx.exchange_diagnostics(conjugate_run)
    assert diagnostics.problems == ()
    estimate = diagnostics.stepping_stone
    # forward and reverse sums bracket log Z (up to their Monte Carlo error)
    assert np.all(estimate.forward < CONJUGATE_LOG_Z + 4 * estimate.chain_stderr)
    assert np.all(estimate.reverse > CONJUGATE_LOG_Z - 4 * estimate.chain_stderr)
    assert np.all(diagnostics.round_trips >= 2)
    # the ladder was tuned: increasing, pinned at 0 and 1
    assert np.all(np.diff(diagnostics.betas, axis=1) > 0)
    np.testing.assert_allclose(diagnostics.betas[:, [0, -1]], [[0, 1], [0, 1]])
    draws = np.asarray(conjugate_run.get_samples(group_by_chain=True)["x"])
    mcse = np.array([az.mcse(draws[..., i]) for i in range(3)])
    assert np.all(np.abs(draws.mean((0, 1)) - CONJUGATE_POSTERIOR_MEAN) < 4 * mcse)


def test_arviz_export_and_habits(conjugate_run):
    idata = nx.to_inference_data(conjugate_run)
    for group in ("posterior", "log_likelihood", "observed_data", "sample_stats"):
        assert group in idata
    assert np.isfinite(loo_elpd(az.loo(idata)))
    assert idata.attrs["sampler"] == "ReplicaExchange"
    assert abs(idata.attrs["log_marginal_likelihood"] - CONJUGATE_LOG_Z) < 0.5
    assert idata.sample_stats["diverging"].dtype == bool
    # The ladder's communication: swap rates per draw and gap, the ladder and round trips.
    assert idata.sample_stats["swap_accept_prob"].shape == (2, 1500, 5)
    assert np.asarray(idata.attrs["betas"]).shape == (2, 6)
    assert idata.attrs["round_trips"] == nx.exchange_diagnostics(conjugate_run).round_trips.tolist()
    assert len(idata.attrs["communication_barrier"]) == 2
    samples = conjugate_run.get_samples()
    predictive = numpyro.infer.Predictive(conjugate_model, samples)(jax.random.PRNGKey(1), None)
    assert predictive["y"].shape == (3000, 3)


def test_bimodal_posterior_gets_both_modes_with_their_mass():
    mcmc = run(
        nx.ReplicaExchange(bimodal_likelihood_model, num_replicas=8, reference="prior"), seed=1
    )
    draws = np.asarray(mcmc.get_samples(group_by_chain=True)["x"])
    left = (draws < 0).astype(float)
    # one NUTS chain stays in one mode; the replica of every chain visits both
    assert np.all((left.mean(1) > 0.1) & (left.mean(1) < 0.6))
    mcse = float(az.mcse(left))
    assert 0 < mcse < 0.03
    assert abs(left.mean() - LEFT_WEIGHT) < 4 * mcse
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evidence = nx.log_marginal_likelihood(mcmc)
    _assert_log_z(evidence, BIMODAL_LOG_Z, max_stderr=0.1)


def test_too_few_replicas_warn_with_the_reason():
    """Two replicas for bumps 100 times narrower than the prior: a prior draw almost never
    lands in a bump, so the posterior replica is stuck and the run must say why."""
    mcmc = run(
        nx.ReplicaExchange(bimodal_likelihood_model, num_replicas=2, reference="prior"),
        num_warmup=100,
        num_samples=300,
        seed=2,
        bump_scale=0.1,
    )
    with pytest.warns(UserWarning, match="round trips|too coarse"):
        nx.log_marginal_likelihood(mcmc)


@pytest.mark.slow
def test_chain_methods_give_the_same_draws():
    # Fixed-length HMC moves: how chains are batched does not depend on the inner kernel, and
    # they compile faster than NUTS.
    draws = {}
    for method in ("sequential", "vectorized", "parallel"):
        kernel = nx.ReplicaExchange(
            conjugate_model, num_replicas=4, reference="prior", inner_kernel=HMC, num_steps=5
        )
        mcmc = run(
            kernel,
            CONJUGATE_DATA,
            # A short warm-up: its step-size adaptation amplifies a rounding difference between
            # batched and unbatched code a thousandfold every ten steps.
            num_warmup=10,
            num_samples=100,
            chain_method=method,
            seed=3,
        )
        draws[method] = np.asarray(mcmc.get_samples(group_by_chain=True)["x"])
    np.testing.assert_allclose(draws["sequential"], draws["vectorized"], atol=1e-8)
    # pmap compiles the same arithmetic differently: equal up to rounding at first, which
    # trajectories amplify over many steps
    np.testing.assert_allclose(draws["sequential"][:, :20], draws["parallel"][:, :20], atol=1e-6)
    assert not np.allclose(draws["sequential"][0], draws["sequential"][1])


def test_a_second_run_reuses_the_compiled_starting_draws():
    """The compiled draw of a batch of chains' starting positions is kept per target: a second
    run on the same data reuses it (a new jax.jit would compile it again), new data rebuild it."""
    kernel = nx.ReplicaExchange(
        conjugate_model, num_replicas=4, reference="prior", inner_kernel=HMC, num_steps=5
    )
    mcmc = run(kernel, CONJUGATE_DATA, num_warmup=10, num_samples=10, chain_method="vectorized")
    compiled = kernel._batch_draws
    mcmc.run(jax.random.PRNGKey(5), CONJUGATE_DATA)
    assert kernel._batch_draws is compiled
    mcmc.run(jax.random.PRNGKey(5), CONJUGATE_DATA + 1.0)
    assert kernel._batch_draws is not compiled and kernel._batch_draws[1] is not compiled[1]


def test_fitted_reference_on_a_linear_regression():
    features, targets = make_linear_regression_data(0, num_data=30, num_features=4)
    kernel = nx.ReplicaExchange(
        linear_regression_model,
        num_replicas=4,
        reference="fit",
        fit_base_kwargs=dict(num_starts=4, num_steps=500, bootstrap_rounds=0),
    )
    mcmc = run(kernel, features, targets, num_warmup=300, num_samples=1000)
    assert isinstance(kernel.reference, (nx.GaussianBase, nx.MixtureBase))
    evidence = nx.log_marginal_likelihood(mcmc)
    _assert_log_z(evidence, linear_regression_log_evidence(features, targets), max_stderr=0.05)


def test_potential_fn_with_a_gaussian_base():
    base = nx.GaussianBase(jnp.zeros(2), 2.0 * jnp.eye(2), log_zeta=0.0)

    def potential(x):  # an unnormalised N((1, -1), 0.5^2 I) with log Z = log(2 pi 0.25) + 3
        return 0.5 * jnp.sum((x - jnp.array([1.0, -1.0])) ** 2) / 0.25 - 3.0

    mcmc = run(
        nx.ReplicaExchange(potential_fn=potential, reference=base, num_replicas=4), num_samples=1000
    )
    assert mcmc.get_samples().shape == (2000, 2)
    _assert_log_z(nx.log_marginal_likelihood(mcmc), np.log(2 * np.pi * 0.25) + 3.0, 0.1)
    with pytest.raises(ValueError, match="GaussianBase or MixtureBase"):
        nx.ReplicaExchange(potential_fn=potential)


def _improper_model():
    x = numpyro.sample("x", dist.ImproperUniform(dist.constraints.real, (), ()))
    numpyro.sample("y", dist.Normal(x, 1.0), obs=0.5)


def _mixed_model():
    k = numpyro.sample("k", dist.Bernoulli(0.5))
    numpyro.sample("x", dist.Normal(k, 1.0))


def test_bad_input_gets_a_clear_error():
    with pytest.raises(ValueError, match="num_replicas"):
        nx.ReplicaExchange(conjugate_model, num_replicas=1)
    with pytest.raises(TypeError, match="num_replicas"):
        nx.ReplicaExchange(conjugate_model, num_replicas="8")
    with pytest.raises(ValueError, match="reference must be"):
        nx.ReplicaExchange(conjugate_model, reference="posterior")
    with pytest.raises(ValueError, match="reference='prior' needs.*reference='fit'"):
        run(
            nx.ReplicaExchange(_improper_model, num_replicas=2, reference="prior"),
            num_warmup=2,
            num_samples=2,
        )
    # The two-leg reference needs the prior too, for its prior leg: the error names it.
    with pytest.raises(ValueError, match="reference='stabilized' .its prior leg. needs"):
        run(
            nx.ReplicaExchange(_improper_model, num_replicas=2, reference="stabilized"),
            num_warmup=2,
            num_samples=2,
        )
    with pytest.raises(ValueError, match="discrete latent sites"):
        run(nx.ReplicaExchange(_mixed_model, num_replicas=2), num_warmup=2, num_samples=2)
    bad_starts = [
        ("init_params have 2 unconstrained dimensions", jnp.zeros(2)),
        # A start the user gives where the density is not finite (its square overflows) is
        # named; drawn starts never are.
        ("not finite at the start of chain 0", jnp.array([0.0, 1e200, 0.0])),
    ]
    for message, start in bad_starts:
        with pytest.raises(ValueError, match=message):
            run(
                nx.ReplicaExchange(conjugate_model, num_replicas=2, reference="prior"),
                CONJUGATE_DATA,
                num_warmup=2,
                num_samples=2,
                num_chains=1,
                init_params={"x": start},
            )
    with pytest.raises(NotImplementedError, match="cannot be a block"):
        Gibbs(
            [(nx.ReplicaExchange(_mixed_model), discrete_latent_sites), (NUTS(_mixed_model), None)]
        )


def test_extra_fields_by_numpyro_names(conjugate_run):
    from numpyro.infer import MCMC

    mcmc = MCMC(conjugate_run.sampler, num_warmup=20, num_samples=20, progress_bar=False)
    mcmc.run(
        jax.random.PRNGKey(5),
        CONJUGATE_DATA,
        extra_fields=(
            "potential_energy",
            "accept_prob",
            "adapt_state.step_size",
            "num_round_trips",
        ),
    )
    fields = mcmc.get_extra_fields()
    assert fields["potential_energy"].shape == (20,)
    assert np.all(np.isfinite(fields["adapt_state.step_size"]))
    with pytest.raises(AttributeError, match="extra_fields can name"):
        mcmc.run(jax.random.PRNGKey(5), CONJUGATE_DATA, extra_fields=("tree_depth",))


def test_the_ladder_is_tuned_in_warmup_then_frozen_and_every_rung_adapts_its_own_moves(
    conjugate_run,
):
    from numpyro.infer import MCMC

    from numpyro_extras.exchange.ladder import tuning_rounds

    # Equal swap rejection in every gap after warm-up's tuning rounds.
    rates = nx.exchange_diagnostics(conjugate_run).swap_accept_rate
    assert np.all(np.ptp(rates, axis=1) < 0.2), rates
    # Each rung adapted its own mass matrix: near the prior (beta = 0: variance 1) it is several
    # times the posterior replica's, which is the posterior variance 0.2.
    inverse_mass = np.asarray(conjugate_run.last_state.inner_state.adapt_state.inverse_mass_matrix)
    assert np.all(inverse_mass[:, 1] > 2 * inverse_mass[:, -1])
    assert np.all(np.abs(inverse_mass[:, -1] - 0.2) < 0.1)

    mcmc = MCMC(conjugate_run.sampler, num_warmup=100, num_samples=30, progress_bar=False)
    mcmc.warmup(jax.random.PRNGKey(6), CONJUGATE_DATA, collect_warmup=True, extra_fields=("betas",))
    warmup = np.asarray(mcmc.get_extra_fields()["betas"])
    # The ladder moves only at the ends of the tuning rounds (8, 16, 32, 64 scans) ...
    moved = np.flatnonzero(np.any(np.diff(warmup, axis=0) != 0, axis=1)) + 1
    np.testing.assert_array_equal(moved + 1, tuning_rounds(100))
    # ... and sampling keeps the last one.
    mcmc.run(jax.random.PRNGKey(7), CONJUGATE_DATA, extra_fields=("betas",))
    sampling = np.asarray(mcmc.get_extra_fields()["betas"])
    np.testing.assert_array_equal(sampling, np.broadcast_to(warmup[-1], sampling.shape))


def test_plot_shows_the_ladder_and_the_trace(conjugate_run):
    figure = nx.plot_exchange(conjugate_run)
    rates, barrier, trace = figure.axes[:3]
    assert len(rates.lines) == 2 and len(trace.lines) == 2
    np.testing.assert_allclose(
        barrier.lines[0].get_ydata()[-1], nx.exchange_diagnostics(conjugate_run).barrier[0]
    )


def test_a_reference_fit_that_may_miss_modes_is_repeated_by_the_estimate():
    kernel = nx.ReplicaExchange(
        bimodal_likelihood_model,
        num_replicas=4,
        reference="fit",
        fit_base_kwargs=dict(num_starts=1, bootstrap_rounds=1, num_steps=300),
    )
    with pytest.warns(nx.BaseCoverageWarning):
        mcmc = run(kernel, num_warmup=100, num_samples=200, bump_scale=0.3)
    assert kernel.reference_fit_problems
    with pytest.warns(UserWarning, match="heavy tail"):
        nx.log_marginal_likelihood(mcmc)
