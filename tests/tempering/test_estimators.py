"""The user-facing helpers around a tempering run: calibrated standard errors, weighted
resampling, ArviZ export, diagnostics, plots, and the SVI-fitted base."""

import warnings

import arviz as az
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

import numpyro_extras as nx
from numpyro_extras import targets
from numpyro_extras.bases import validate_base
from numpyro_extras.targets import sign_product_target
from numpyro_extras.tempering.base_fit import _batched_potential, _importance_masses

BIMODAL_LOG_Z = 2.0
BIMODAL_BASE = nx.GaussianBase(
    jnp.array([-1.6]), jnp.array([[np.sqrt(63.64)]]), jnp.asarray(BIMODAL_LOG_Z - 0.5)
)


@pytest.fixture(scope="module")
def bimodal_run():
    mcmc = MCMC(
        nx.GibbsContinuousTempering(targets.bimodal_model, base=BIMODAL_BASE),
        num_warmup=300,
        num_samples=1000,
        num_chains=80,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(11), BIMODAL_LOG_Z)
    return mcmc


def test_stderr_is_calibrated(bimodal_run):
    """20 independent 4-chain estimates: about 95% within 2 stderr of the truth, and the spread
    of the estimates matches the reported stderr."""
    fields = bimodal_run.get_extra_fields(group_by_chain=True)
    deltas, log_zetas = np.asarray(fields["delta"]), np.asarray(fields["log_zeta"])[:, 0]
    estimates = [
        nx.tempering_log_normalizer(deltas[group : group + 4], log_zetas[group : group + 4])
        for group in range(0, 80, 4)
    ]
    log_z = np.array([estimate.log_z for estimate in estimates])
    stderr = np.array([estimate.stderr for estimate in estimates])
    covered = np.abs(log_z - BIMODAL_LOG_Z) < 2 * stderr
    assert covered.sum() >= 16, (log_z, stderr)
    spread_ratio = np.std(log_z, ddof=1) / np.sqrt(np.mean(stderr**2))
    assert 0.6 < spread_ratio < 1.6, spread_ratio
    pooled = nx.log_marginal_likelihood(bimodal_run)
    assert pooled.stderr < 0.03 and abs(pooled.log_z - BIMODAL_LOG_Z) < 4 * pooled.stderr


def test_posterior_samples_are_the_target(bimodal_run):
    draws = nx.posterior_samples(bimodal_run, jax.random.PRNGKey(0), num_samples=20_000)
    assert set(draws) == {"x"} and draws["x"].shape == (20_000,)
    # mode masses 0.6 / 0.4; within each mode the target's mean and scale
    x = draws["x"]
    assert abs(np.mean(x < 0) - 0.6) < 0.05
    assert abs(np.mean(x[x < 0]) + 8) < 0.2 and abs(np.std(x[x < 0]) - 1) < 0.15
    assert abs(np.mean(x[x >= 0]) - 8) < 0.4 and abs(np.std(x[x >= 0]) - 2) < 0.3


def test_inference_data(bimodal_run):
    idata = nx.to_inference_data(bimodal_run, jax.random.PRNGKey(0))
    assert idata.posterior["x"].shape == (80, 1000)
    for field in ("beta", "delta", "log_weight", "log_base_weight", "diverging"):
        assert idata.sample_stats[field].shape == (80, 1000)
    np.testing.assert_allclose(
        np.exp(idata.sample_stats["log_weight"].values).sum(axis=1), 1.0, rtol=1e-9
    )
    assert abs(float((idata.posterior["x"] < 0).mean()) - 0.6) < 0.05
    assert abs(idata.attrs["log_marginal_likelihood"] - BIMODAL_LOG_Z) < 0.1
    summary = az.summary(idata, var_names=["x"])
    assert np.isfinite(summary.loc["x", "ess_bulk"])


def test_diagnostics_and_plot(bimodal_run):
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
    matplotlib.use("Agg")
    figure = nx.plot_tempering(bimodal_run)
    assert len(figure.axes) == 3


def test_base_moment_check_warns_for_a_wrong_base():
    """log zeta far too small keeps the chain at beta near 1, far from the base: the base end is
    never visited, and the eq. 22 check says so."""

    def potential(position):
        return 0.5 * jnp.sum(position**2) + 0.5 * jnp.log(2 * jnp.pi)

    base = nx.GaussianBase(jnp.array([4.0]), jnp.array([[0.3]]), jnp.asarray(-30.0))
    mcmc = MCMC(
        nx.GibbsContinuousTempering(
            potential_fn=potential, base=base, num_steps=3, adapt_log_zeta=False
        ),
        num_warmup=100,
        num_samples=300,
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(0))
    assert np.mean(mcmc.get_extra_fields()["beta"] > 0.9) > 0.9
    with pytest.warns(UserWarning, match="base-moment check"):
        nx.log_marginal_likelihood(mcmc)
    assert not nx.base_moment_check(mcmc, warn=False).passed


def test_fit_base_mixture_finds_both_modes():
    """The default base: a component on each mode with its importance-sampled mass (the target
    puts 0.6 on x < 0), plus the defensive component; log zeta by importance sampling."""
    base = nx.fit_base(jax.random.PRNGKey(0), targets.bimodal_model, (BIMODAL_LOG_Z,))
    assert isinstance(base, nx.MixtureBase)
    weights = np.exp(np.asarray(base.component_log_weights))
    locs = np.asarray(base.component_locs)[:, 0]
    fits, defensive_weight = slice(0, len(weights) - 1), weights[-1]
    assert defensive_weight == pytest.approx(0.1)
    left_mass = np.sum(weights[fits][locs[fits] < 0]) / (1 - defensive_weight)
    assert abs(left_mass - 0.6) < 0.03
    assert abs(float(base.log_zeta) - BIMODAL_LOG_Z) < 0.05
    single = nx.fit_base(
        jax.random.PRNGKey(0), targets.bimodal_model, (BIMODAL_LOG_Z,), method="gaussian"
    )
    # one fit sits in one mode: its ELBO is that mode's log mass, a lower bound
    assert isinstance(single, nx.GaussianBase)
    assert float(single.log_zeta) < BIMODAL_LOG_Z
    assert float(single.covariance[0, 0]) < 5.0


def test_importance_masses_share_a_mode_between_duplicate_fits():
    """Two identical fits of one Gaussian target split its mass, and log zeta is log Z: a sum of
    their ELBOs would count the mode twice (log Z + log 2)."""
    log_z = 1.5
    loc, scale_tril = jnp.array([1.0, -2.0]), jnp.array([[1.0, 0.0], [0.3, 0.5]])
    target = dist.MultivariateNormal(loc, scale_tril=scale_tril)

    def potential_fn(x):
        return -target.log_prob(x) - log_z

    locs = np.stack([np.asarray(loc)] * 2 + [np.zeros(2)])
    scale_trils = np.stack([np.asarray(scale_tril)] * 2 + [3.0 * np.eye(2)])
    estimate = _importance_masses(
        jax.random.PRNGKey(0),
        _batched_potential(potential_fn),
        locs,
        scale_trils,
        num_fits=2,
        num_draws=3000,
    )
    np.testing.assert_allclose(estimate.masses, [0.5, 0.5], atol=1e-9)
    assert abs(estimate.log_zeta - log_z) < 0.02


def test_fit_base_covers_the_modes_of_a_sign_product():
    """The default fit on 5 independent sign-ambiguous parameters (32 modes, unequal weights):
    its refitting rounds, half of whose starts are new dispersed points, put a component on
    every mode, so the importance-sampled log zeta is log Z (its Monte Carlo error, with an
    importance ESS of about 2000, is about 0.02)."""
    target = sign_product_target(1, 5)
    with warnings.catch_warnings():
        # Whether the last round still finds a mode (and so warns) is not the point here.
        warnings.simplefilter("ignore", nx.BaseCoverageWarning)
        base = nx.fit_base(
            jax.random.PRNGKey(0), target.model, target.model_args, progress_bar=False
        )
    component_labels = target.mode_labels(np.asarray(base.component_locs[:-1]))
    assert len(set(component_labels.tolist())) == target.num_modes == 32
    assert abs(float(base.log_zeta) - target.log_z) < 0.08


def test_fit_base_warns_for_heavy_tailed_importance_weights():
    """A Cauchy posterior: Gaussian fits are lighter tailed than the target, so the importance
    weights of the mass estimate have an infinite-variance tail (Pareto k above 0.7)."""

    def cauchy_model():
        numpyro.sample("x", dist.StudentT(1.0, jnp.zeros(4), 1.0).to_event(1))

    with pytest.warns(nx.BaseCoverageWarning, match="Pareto k"):
        nx.fit_base(
            jax.random.PRNGKey(0),
            cauchy_model,
            num_starts=2,
            num_steps=300,
            bootstrap_rounds=0,
            progress_bar=False,
        )


def test_mixture_base_density_and_gradient():
    """psi and its gradient against NumPyro's mixture log density and jax.grad."""
    base = nx.MixtureBase(
        jnp.array([[-2.0, 0.5], [1.5, 1.0]]),
        jnp.array([[[1.0, 0.0], [0.4, 0.7]], [[0.5, 0.0], [-0.2, 1.3]]]),
        jnp.log(jnp.array([0.3, 0.7])),
        jnp.asarray(0.0),
    )
    mixture = dist.MixtureSameFamily(
        dist.Categorical(probs=jnp.array([0.3, 0.7])),
        dist.MultivariateNormal(base.component_locs, scale_tril=base.component_scale_trils),
    )
    potential_and_gradient = base.potential_and_gradient()
    for point in jax.random.normal(jax.random.PRNGKey(1), (5, 2)) * 2:
        value, gradient = potential_and_gradient(point)
        np.testing.assert_allclose(value, -mixture.log_prob(point), rtol=1e-10)
        expected = jax.grad(lambda x: -mixture.log_prob(x))(point)
        np.testing.assert_allclose(gradient, expected, rtol=1e-8, atol=1e-12)
    draws = base.sample(jax.random.PRNGKey(2), (20000,))
    np.testing.assert_allclose(draws.mean(0), base.loc, atol=0.05)
    assert validate_base(base, 2) is not None
    with pytest.raises(ValueError, match="sum to 1"):
        validate_base(base._replace(component_log_weights=jnp.zeros(2)))


def test_fit_base_mean_field_guide():
    """guide="diagonal" (the paper's mean-field ADVI base for radon) gives a diagonal base."""
    loc = jnp.array([1.0, -2.0])
    scale_tril = jnp.array([[1.0, 0.0], [0.0, 0.5]])
    base = nx.fit_base(
        jax.random.PRNGKey(0),
        targets.gaussian_model,
        (loc, scale_tril, 1.5),
        method="gaussian",
        guide="diagonal",
        num_steps=1500,
    )
    assert not np.any(np.tril(np.asarray(base.scale_tril), -1))
    np.testing.assert_allclose(base.loc, loc, atol=0.1)
    np.testing.assert_allclose(np.diagonal(base.covariance), [1.0, 0.25], rtol=0.2)
    # an exact fit: the ELBO is log Z
    assert abs(float(base.log_zeta) - 1.5) < 0.05


def test_gaussian_bootstrap_round_refits_to_the_tempering_run():
    """A bootstrap round of method="gaussian" replaces the mean-field fit's zero correlation by
    the run's weighted covariance, and log zeta by the run's log Z."""
    loc = jnp.array([1.0, -2.0])
    scale_tril = jnp.array([[1.0, 0.0], [0.5, 0.5]])
    settings = dict(method="gaussian", guide="diagonal", num_steps=500, progress_bar=False)
    args = (loc, scale_tril, 1.5)
    fitted = nx.fit_base(jax.random.PRNGKey(0), targets.gaussian_model, args, **settings)
    assert float(fitted.covariance[0, 1]) == 0.0
    refitted = nx.fit_base(
        jax.random.PRNGKey(0),
        targets.gaussian_model,
        args,
        bootstrap_rounds=1,
        bootstrap_num_warmup=200,
        bootstrap_num_samples=500,
        **settings,
    )
    np.testing.assert_allclose(refitted.covariance, scale_tril @ scale_tril.T, atol=0.15)
    np.testing.assert_allclose(refitted.loc, loc, atol=0.1)
    assert abs(float(refitted.log_zeta) - 1.5) < 0.1
