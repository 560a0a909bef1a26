"""The tempering kernels' exact moves (the swap with the target replica, the proposal from the
base), their posterior draws, and the NumPyro and ArviZ habits they support: get_samples as the
posterior, jit_model_args, extra_fields, ArviZ's LOO/WAIC, progress_bar=False, warm-up
adaptation of log zeta, warnings, and input validation."""

import warnings

import arviz as az
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from arviz_checks import loo_elpd
from numpyro.infer import MCMC, NUTS

import numpyro_extras as nx
from numpyro_extras import targets
from numpyro_extras.targets import sign_product_target
from numpyro_extras.tempering.chains import (
    PointEvaluation,
    propose_from_base,
    swap_with_replica,
)
from numpyro_extras.tempering.kernels import AUTO_MOVES_PER_DRAW

KERNELS = [nx.JointContinuousTempering, nx.GibbsContinuousTempering]
BIMODAL_LOG_Z = 2.0
BIMODAL_BASE = nx.GaussianBase(
    jnp.array([-1.6]), jnp.array([[np.sqrt(63.64)]]), jnp.asarray(BIMODAL_LOG_Z)
)
SMALL_FIT = {"num_starts": 2, "num_steps": 500, "bootstrap_rounds": 0}


def _mcmc(kernel, num_warmup=500, num_samples=1000, num_chains=4, **kwargs):
    return MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=kwargs.pop("chain_method", "vectorized"),
        progress_bar=kwargs.pop("progress_bar", False),
        **kwargs,
    )


def _phi(x):
    return 0.25 * np.sum(x**4) - np.sum(x**2) + 0.3 * x[0]


def _psi(x):
    return 0.5 * np.sum(x**2 / 4.0) + np.log(2 * np.pi * 4.0)


def _evaluation(x):
    """A :class:`PointEvaluation` of the quartic ``_phi`` and the Gaussian ``_psi`` at ``x``
    (gradients unused by the moves tested with it)."""
    x = np.asarray(x)
    zero = jnp.zeros(2)
    return PointEvaluation(jnp.asarray(x), _phi(x), zero, _psi(x), zero)


def test_swap_satisfies_detailed_balance_on_the_product_density():
    """Exact check: p(x, beta) p(y) a(x <-> y) is symmetric in x and y, with p(x, beta) of paper
    eq. 16 written out independently of the implementation, for any log zeta."""
    rng = np.random.default_rng(0)
    for _ in range(50):
        x, y = rng.normal(size=(2, 2)) * 2
        beta, log_zeta = rng.uniform(), rng.normal() * 5

        def log_product(first, second, beta=beta, log_zeta=log_zeta):
            tempered = -beta * _phi(first) - (1 - beta) * _psi(first) - beta * log_zeta
            return tempered - _phi(second)

        key = jax.random.PRNGKey(0)
        _, _, forward = swap_with_replica(key, beta, _evaluation(x), _evaluation(y))
        _, _, backward = swap_with_replica(key, beta, _evaluation(y), _evaluation(x))
        lhs = log_product(x, y) + np.log(float(forward))
        rhs = log_product(y, x) + np.log(float(backward))
        np.testing.assert_allclose(lhs, rhs, rtol=0, atol=1e-9)
        assert max(float(forward), float(backward)) == pytest.approx(1.0)


def test_swap_rejects_non_finite_replica():
    good = PointEvaluation(jnp.zeros(1), 1.0, jnp.zeros(1), 0.0, jnp.zeros(1))
    bad = good._replace(target_potential=jnp.nan)
    tempered, replica, accept_prob = swap_with_replica(jax.random.PRNGKey(0), 0.5, good, bad)
    assert float(accept_prob) == 0.0
    assert float(tempered.target_potential) == 1.0 and np.isnan(float(replica.target_potential))


class _FixedDrawBase:
    """A stand-in base whose every draw is one given point."""

    def __init__(self, point):
        self.point = jnp.asarray(point)

    def sample(self, rng_key, sample_shape=()):
        return self.point


def test_tempered_potential_at_beta_one_is_the_target_to_the_last_bit():
    # The target replica moves with the tempered family at beta = 1, so there it must be phi
    # itself, even where psi is many orders of magnitude larger.
    def phi(x):
        return 0.5 * jnp.sum((x - 3.0) ** 2) + 0.1

    base = nx.GaussianBase(jnp.zeros(2), 1e-3 * jnp.eye(2), log_zeta=0.0)
    potential = nx.tempered_potential(phi, base)
    x = jnp.array([1.3, -2.7])
    assert potential(x, 1.0) == phi(x)
    np.testing.assert_array_equal(jax.grad(potential)(x, 1.0), jax.grad(phi)(x))
    # d/d beta is phi - psi at every beta.
    psi = base.potential_and_gradient()(x)[0]
    np.testing.assert_allclose(jax.grad(potential, argnums=1)(x, 0.3), phi(x) - psi, rtol=1e-12)


def test_base_proposal_satisfies_detailed_balance_given_beta():
    """Exact check of the independence move: p(x | beta) q(x') a(x -> x') is symmetric in x and
    x', with p(x | beta) proportional to exp(-beta phi - (1 - beta) psi) (paper eq. 8) and q the
    base, written out independently of the implementation."""
    rng = np.random.default_rng(1)
    evaluate, phi, psi = _evaluation, _phi, _psi
    for _ in range(50):
        x, x_new = rng.normal(size=(2, 2)) * 2
        beta = rng.uniform()

        key = jax.random.PRNGKey(0)
        moved, forward = propose_from_base(key, beta, evaluate(x), _FixedDrawBase(x_new), evaluate)
        _, backward = propose_from_base(key, beta, evaluate(x_new), _FixedDrawBase(x), evaluate)
        lhs = -beta * phi(x) - (1 - beta) * psi(x) - psi(x_new) + np.log(float(forward))
        rhs = -beta * phi(x_new) - (1 - beta) * psi(x_new) - psi(x) + np.log(float(backward))
        np.testing.assert_allclose(lhs, rhs, rtol=0, atol=1e-9)
        assert max(float(forward), float(backward)) == pytest.approx(1.0)


def test_base_proposal_rejects_a_non_finite_point():
    def evaluate(x):
        value = jnp.where(x[0] > 5.0, jnp.nan, jnp.sum(x**2))
        return PointEvaluation(x, value, 2 * x, 0.5 * jnp.sum(x**2), x)

    start = evaluate(jnp.zeros(1))
    moved, accept_prob = propose_from_base(
        jax.random.PRNGKey(0), 0.0, start, _FixedDrawBase(jnp.array([9.0])), evaluate
    )
    assert float(accept_prob) == 0.0
    assert float(moved.position[0]) == 0.0


EXTRA_FIELDS = ("potential_energy", "energy", "num_steps", "accept_prob", "adapt_state.step_size")


@pytest.fixture(scope="module")
def joint_bimodal_run():
    """Joint continuous tempering on the bimodal target with its exact base, collecting the
    extra fields NumPyro users ask for."""
    mcmc = _mcmc(nx.JointContinuousTempering(targets.bimodal_model, base=BIMODAL_BASE), 500, 3000)
    mcmc.run(jax.random.PRNGKey(0), BIMODAL_LOG_Z, extra_fields=EXTRA_FIELDS)
    return mcmc


@pytest.fixture(scope="module")
def gibbs_bimodal_run():
    mcmc = _mcmc(nx.GibbsContinuousTempering(targets.bimodal_model, base=BIMODAL_BASE), 500, 3000)
    mcmc.run(jax.random.PRNGKey(0), BIMODAL_LOG_Z)
    return mcmc


@pytest.mark.parametrize("run", ["joint_bimodal_run", "gibbs_bimodal_run"])
def test_get_samples_are_posterior_draws(run, request):
    """The sample field is the posterior: on the bimodal target, the fraction of draws in the
    left mode is 0.6 within 4 Monte Carlo errors, and print_summary / ArviZ see the posterior."""
    mcmc = request.getfixturevalue(run)
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"])
    left = (x < 0).astype(float)
    stderr = float(az.mcse(left, method="mean"))
    assert stderr < 0.04
    assert abs(left.mean() - 0.6) < 4 * stderr
    # the posterior mean is -1.6; the tempered draws' plain mean is not
    mean_stderr = float(az.mcse(x, method="mean"))
    assert abs(x.mean() + 1.6) < 4 * mean_stderr
    diagnostics = nx.tempering_diagnostics(mcmc)
    assert diagnostics.posterior_ess > 100
    assert np.all(diagnostics.swap_accept_rate > 0.3)
    idata = az.from_numpyro(mcmc)
    assert abs(float(idata.posterior["x"].mean()) + 1.6) < 4 * mean_stderr
    tempered = np.asarray(nx.tempered_samples(mcmc)["x"])
    assert tempered.shape == (4 * 3000,)


def _regression_posterior(features, observed, prior_scale=1.0, noise_scale=1.0):
    precision = np.eye(features.shape[1]) / prior_scale**2 + features.T @ features / noise_scale**2
    covariance = np.linalg.inv(precision)
    return covariance @ features.T @ observed / noise_scale**2, np.sqrt(np.diag(covariance))


@pytest.fixture(scope="module")
def regression_rerun():
    """Gibbs continuous tempering with jit_model_args, run on one data set and then on another:
    the rerun must rebuild the potential and refit the base for the new data. The kernels share
    that shell and the export: one kernel exercises them."""
    features, first = targets.make_linear_regression_data(seed=0, num_data=30, num_features=2)
    second = first + 3.0 * features[:, 0]
    kernel = nx.GibbsContinuousTempering(targets.linear_regression_model, fit_base_kwargs=SMALL_FIT)
    mcmc = _mcmc(kernel, num_warmup=300, num_samples=1000, jit_model_args=True)
    mcmc.run(jax.random.PRNGKey(0), features, first)
    mcmc.run(jax.random.PRNGKey(1), features, second)
    return mcmc, features, second


def test_jit_model_args_rebuilds_for_new_data(regression_rerun):
    mcmc, features, observed = regression_rerun
    mean, sd = _regression_posterior(np.asarray(features), np.asarray(observed))
    draws = np.asarray(mcmc.get_samples(group_by_chain=True)["w"])
    for coordinate in range(2):
        stderr = float(az.mcse(draws[..., coordinate], method="mean"))
        assert stderr < 0.2 * sd[coordinate]
        assert abs(draws[..., coordinate].mean() - mean[coordinate]) < 4 * stderr
    evidence = nx.log_marginal_likelihood(mcmc, warn=False)
    truth = targets.linear_regression_log_evidence(features, observed)
    assert abs(evidence.log_z - truth) < 4 * evidence.stderr


def test_extra_fields_numpyro_users_pass(joint_bimodal_run):
    mcmc = joint_bimodal_run
    fields = mcmc.get_extra_fields()
    for name in EXTRA_FIELDS:
        assert fields[name].shape == (4 * 3000,), name
    # potential_energy is the posterior draw's potential, as for NUTS
    x = mcmc.get_samples()["x"]
    potential = jax.vmap(mcmc.sampler.flat_model.potential_fn)(x[:, None])
    np.testing.assert_allclose(fields["potential_energy"], potential, rtol=1e-6)
    idata = az.from_numpyro(mcmc)
    assert "lp" in idata.sample_stats and "beta" in idata.sample_stats


def test_unknown_extra_field_lists_what_exists():
    mcmc = _mcmc(
        nx.GibbsContinuousTempering(targets.bimodal_model, base=BIMODAL_BASE), num_chains=1
    )
    with pytest.raises(AttributeError, match="extra_fields can name: z, tempered_z, beta"):
        mcmc.run(jax.random.PRNGKey(0), BIMODAL_LOG_Z, extra_fields=("bogus",))


def test_arviz_loo_waic_compare(regression_rerun):
    """to_inference_data has log_likelihood and observed_data; elpd matches a NUTS run."""
    mcmc, features, observed = regression_rerun
    idata = nx.to_inference_data(mcmc)
    assert "log_likelihood" in idata and "observed_data" in idata
    assert idata.sample_stats["log_weight"].shape == (4, 1000)
    assert abs(idata.attrs["log_marginal_likelihood"] - mcmc_log_z(mcmc)) < 1e-12
    nuts = _mcmc(NUTS(targets.linear_regression_model), num_samples=1000)
    nuts.run(jax.random.PRNGKey(1), features, observed)
    nuts_idata = az.from_numpyro(nuts, log_likelihood=True)
    assert abs(loo_elpd(az.loo(idata)) - loo_elpd(az.loo(nuts_idata))) < 0.5
    if hasattr(az, "waic"):  # ArviZ 1.x has no WAIC
        assert abs(az.waic(idata).elpd_waic - az.waic(nuts_idata).elpd_waic) < 0.5
    comparison = az.compare({"tempering": idata, "nuts": nuts_idata})
    assert set(comparison.index) == {"tempering", "nuts"}
    # ArviZ's summaries and plots read the export as they read az.from_numpyro's.
    summary = az.summary(idata)
    assert {"w[0]", "w[1]"} <= set(summary.index)
    assert np.all(summary["r_hat"] < 1.05)
    assert float(az.ess(idata)["w"].min()) > 100
    az.plot_trace(idata)
    plt.close("all")


def mcmc_log_z(mcmc):
    return nx.log_marginal_likelihood(mcmc, warn=False).log_z


def test_progress_bar_false_silences_the_base_fit(capfd):
    features, observed = targets.make_linear_regression_data(seed=0, num_data=20, num_features=2)
    small_fit = {"num_starts": 2, "num_steps": 200, "bootstrap_rounds": 1}
    kernel = nx.GibbsContinuousTempering(targets.linear_regression_model, fit_base_kwargs=small_fit)
    _mcmc(kernel, num_warmup=50, num_samples=50, num_chains=1).run(
        jax.random.PRNGKey(0), features, observed
    )
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


@pytest.mark.parametrize("adapt", [True, False])
def test_log_zeta_adapts_in_warmup(adapt):
    """A base whose log zeta is 8 nats too high keeps a chain at beta near 0 unless log zeta is
    adapted during warm-up; adapted, every chain reaches both ends and log Z is right."""
    base = BIMODAL_BASE._replace(log_zeta=jnp.asarray(BIMODAL_LOG_Z + 8.0))
    kernel = nx.GibbsContinuousTempering(targets.bimodal_model, base=base, adapt_log_zeta=adapt)
    mcmc = _mcmc(kernel, num_samples=2000)
    mcmc.run(jax.random.PRNGKey(3), BIMODAL_LOG_Z)
    diagnostics = nx.tempering_diagnostics(mcmc)
    log_zeta = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["log_zeta"])
    assert np.all(log_zeta == log_zeta[:, :1])  # fixed after warm-up
    if adapt:
        assert np.all(np.abs(log_zeta[:, 0] - BIMODAL_LOG_Z) < 1.0)
        assert np.all(diagnostics.fraction_near_target > 0.05)
        assert np.all(diagnostics.round_trips >= 5)
        evidence = nx.log_marginal_likelihood(mcmc)
        assert evidence.stderr < 0.1 and abs(evidence.log_z - BIMODAL_LOG_Z) < 4 * evidence.stderr
    else:
        assert np.all(log_zeta == BIMODAL_LOG_Z + 8.0)
        assert np.all(diagnostics.fraction_near_target < 0.01)


def test_per_chain_log_zeta_pooling_is_exact():
    """Chains with different log zeta pool into the right log Z: equal Delta draws per chain
    shifted by each chain's log zeta give back the shared value."""
    delta = np.random.default_rng(0).normal(size=(3, 500))
    single = nx.tempering_log_normalizer(delta, 1.0)
    shifts = np.array([0.0, 2.0, -1.5])
    # chain c has zeta_c = e^shift_c * zeta; with the same x its Delta is larger by shift_c
    pooled = nx.tempering_log_normalizer(delta + shifts[:, None], 1.0 + shifts)
    per_chain = [nx.tempering_log_normalizer(delta[c], 1.0).log_z for c in range(3)]
    assert abs(pooled.log_z - single.log_z) < 0.5
    assert min(per_chain) - 0.2 < pooled.log_z < max(per_chain) + 0.2


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"num_steps": -3}, ValueError, "num_steps must be a positive integer"),
        ({"num_steps": 2.5}, TypeError, "num_steps must be a positive integer"),
        ({"step_size": "0.1"}, TypeError, "step_size must be a positive finite number"),
        ({"step_size": 0.0}, ValueError, "step_size must be a positive finite number"),
        ({"target_accept_prob": 1.5}, ValueError, "target_accept_prob must be a number in"),
        ({"max_tree_depth": 0}, ValueError, "max_tree_depth must be a positive integer"),
        ({"moves_per_draw": 0}, ValueError, "moves_per_draw must be a positive integer"),
    ],
)
def test_gibbs_settings_are_validated(kwargs, error, message):
    with pytest.raises(error, match=message):
        nx.GibbsContinuousTempering(targets.bimodal_model, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"beta_scale": "1"}, TypeError, "beta_scale must be a positive number"),
        ({"beta_scale": -1.0}, ValueError, "beta_scale must be a positive number"),
        ({"initial_beta_logit": float("nan")}, ValueError, "initial_beta_logit"),
        ({"step_size": "0.1"}, TypeError, "step_size must be a positive finite number"),
        ({"trajectory_lenght": 1.0}, TypeError, "Unknown inner kernel settings"),
        ({"target_accept_prob": 0}, ValueError, "target_accept_prob must be a number in"),
        ({"moves_per_draw": "4"}, TypeError, "moves_per_draw must be a positive integer"),
    ],
)
def test_joint_settings_are_validated(kwargs, error, message):
    with pytest.raises(error, match=message):
        nx.JointContinuousTempering(targets.bimodal_model, **kwargs)


@pytest.mark.parametrize("run", ["joint_bimodal_run", "gibbs_bimodal_run"])
def test_quiet_on_a_good_run(run, request):
    mcmc = request.getfixturevalue(run)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nx.log_marginal_likelihood(mcmc)
    assert nx.tempering_diagnostics(mcmc).problems == ()


def test_warns_when_chains_are_stuck_in_a_mode_the_base_misses():
    """A base on the left mode only, two chains started at beta near 1 in the right mode: those
    never come down to beta near 0, the chains disagree, and the estimate says so."""
    base = nx.GaussianBase(jnp.array([-8.0]), jnp.array([[1.0]]), jnp.asarray(np.log(0.6) + 2))
    kernel = nx.JointContinuousTempering(
        targets.bimodal_model, base=base, initial_beta_logit=10.0, adapt_log_zeta=False
    )
    mcmc = _mcmc(kernel, num_samples=1000)
    mcmc.run(
        jax.random.PRNGKey(0), BIMODAL_LOG_Z, init_params={"x": jnp.array([-8.0, -8.0, 8.0, 8.0])}
    )
    diagnostics = nx.tempering_diagnostics(mcmc)
    assert any("never reached beta < 0.1" in problem for problem in diagnostics.problems)
    with pytest.warns(UserWarning, match="never reached beta < 0.1"):
        nx.log_marginal_likelihood(mcmc)


def test_warns_when_the_base_fit_may_miss_modes():
    """32 modes and a base fit too small to find them all: the fit warns, and the run's
    diagnostics and log Z estimate repeat the warning, however well the chains agree."""
    target = sign_product_target(1, 5)
    small_fit = {"num_starts": 16, "bootstrap_rounds": 1, "num_steps": 300}
    kernel = nx.GibbsContinuousTempering(target.model, fit_base_kwargs=small_fit)
    mcmc = _mcmc(kernel, num_warmup=100, num_samples=100, num_chains=2)
    with pytest.warns(nx.ModeSearchWarning, match="may have modes the base does not cover"):
        mcmc.run(jax.random.PRNGKey(0), *target.model_args)
    assert any("may have modes" in problem for problem in kernel.base_fit_problems)
    # ... with many modes found, so the chain makes more moves between the kept draws (one per
    # draw in warm-up).
    assert kernel.moves_per_draw == AUTO_MOVES_PER_DRAW > 1
    np.testing.assert_array_equal(mcmc.last_state.iteration, 100 + AUTO_MOVES_PER_DRAW * 100)
    assert any("may have modes" in problem for problem in nx.tempering_diagnostics(mcmc).problems)
    with pytest.warns(UserWarning, match="may have modes the base does not cover") as caught:
        nx.log_marginal_likelihood(mcmc)
    assert "nx.ReplicaExchange(model)" in str(caught[0].message)


def eight_schools_centred(sigma, y=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("schools", len(sigma)):
        theta = numpyro.sample("theta", dist.Normal(mu, tau))
        numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)


# The diagnostics are shared by both kernels: one kernel exercises them.
def test_warns_on_a_funnel():
    """Centred eight schools, a funnel the kernel does not sample well: the estimate comes with
    a warning that says why."""
    y = jnp.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
    sigma = jnp.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])
    kernel = nx.GibbsContinuousTempering(eight_schools_centred, fit_base_kwargs=SMALL_FIT)
    mcmc = _mcmc(kernel, num_samples=1000)
    mcmc.run(jax.random.PRNGKey(0), sigma, y)
    # One mode: the fit's search for modes settles (a heavy tail of its importance weights may
    # still warn), so the kernel keeps one move per draw.
    assert kernel.moves_per_draw == 1
    problems = nx.tempering_diagnostics(mcmc).problems
    assert problems
    with pytest.warns(UserWarning, match="shows trouble") as caught:
        nx.log_marginal_likelihood(mcmc)
    assert all(problem in str(caught[0].message) for problem in problems)


@pytest.mark.parametrize("kernel_class", KERNELS)
def test_not_a_gibbs_block_and_says_why(kernel_class):
    from numpyro.infer import Gibbs

    with pytest.raises(NotImplementedError, match="cannot be a block of numpyro.infer.Gibbs"):
        Gibbs([(kernel_class(targets.bimodal_model), ["x"])])
