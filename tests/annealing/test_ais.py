"""nx.ais: annealed importance sampling, marginalized AIS and reverse (BDMC) runs on NumPyro models.

Every check compares with an exact ``log Z`` (closed form, enumeration or quadrature) within a
tolerance set by the Monte Carlo error of the estimate, with fixed keys.
"""

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal, norm

import numpyro_extras as nx
from numpyro_extras.annealing import ais, model_annealing
from numpyro_extras.annealing.boltzmann import ising_lattice
from numpyro_extras.annealing.boltzmann_models import ising_model
from numpyro_extras.annealing.driver import compiled_annealing_chunk
from numpyro_extras.annealing.model_annealing import annealing_path
from numpyro_extras.model.potential import split_model
from numpyro_extras.targets import (
    FUNNEL_DATA,
    bimodal_model,
    centred_funnel_log_evidence,
    centred_funnel_model,
    linear_regression_log_evidence,
    linear_regression_model,
    load_german_credit,
    logistic_regression_model,
    make_linear_regression_data,
)

PRIOR_SCALE = 2.0
# The run size of most checks: 500 particles, 100 annealing steps.
RUN = dict(num_particles=500, num_temperatures=100, progress_bar=False)


def conjugate_gaussian_model(y):
    """x ~ N(0, 2^2 I), y ~ N(x, I): log Z = log N(y; 0, 5 I)."""
    x = numpyro.sample("x", dist.Normal(0.0, PRIOR_SCALE).expand([y.shape[0]]).to_event(1))
    numpyro.sample("y", dist.Normal(x, 1.0).to_event(1), obs=y)


def conjugate_gaussian_log_z(y):
    return float(norm.logpdf(np.asarray(y), 0.0, math.sqrt(PRIOR_SCALE**2 + 1.0)).sum())


MIXTURE_DATA = jnp.array([-0.4, 2.9, 0.3, 3.6, 1.1, -1.2])


def mixture_model(y):
    """mu ~ N(0, 2^2); z_i ~ Bernoulli(0.3); y_i ~ N(mu + 3 z_i, 1)."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 2.0))
    with numpyro.plate("data", y.shape[0]):
        z = numpyro.sample("z", dist.Bernoulli(0.3))
        numpyro.sample("y", dist.Normal(mu + 3.0 * z, 1.0), obs=y)


def mixture_log_z(y):
    """log of the integral over mu of p(mu) prod_i (0.7 N(y_i; mu, 1) + 0.3 N(y_i; mu + 3, 1))."""
    grid = np.linspace(-20.0, 20.0, 40001)
    y = np.asarray(y)[:, None]
    log_terms = np.logaddexp(
        np.log(0.7) + norm.logpdf(y, grid, 1.0), np.log(0.3) + norm.logpdf(y, grid + 3.0, 1.0)
    )
    log_integrand = norm.logpdf(grid, 0.0, 2.0) + log_terms.sum(0)
    return float(logsumexp(log_integrand) + np.log(grid[1] - grid[0]))


def assert_within_error(evidence, truth, max_stderr):
    assert np.isfinite(evidence.log_z)
    assert 0.0 < evidence.stderr < max_stderr, evidence
    assert abs(evidence.log_z - truth) < 4.0 * evidence.stderr, (evidence, truth)


def test_z_estimate_is_unbiased_and_a_broken_transition_is_caught():
    # Particles are independent runs here (fixed step size, no mass or pilot adaptation), so
    # the particles' weights are independent draws of Z_hat from a single-particle run.
    y = jnp.array([1.3])
    exact_z = math.exp(conjugate_gaussian_log_z(y))
    settings = dict(
        num_particles=20000,
        num_temperatures=4,
        schedule="linear",
        base="prior",
        step_size=0.8,
        adapt_mass=False,
        num_pilot_steps=0,
        progress_bar=False,
    )

    def mean_and_error(evidence):
        runs = np.exp(np.asarray(evidence.log_weights)).reshape(2000, 10).mean(axis=1)
        return runs.mean(), runs.std(ddof=1) / math.sqrt(runs.size)

    evidence = ais(jax.random.PRNGKey(0), conjugate_gaussian_model, (y,), **settings)
    mean, error = mean_and_error(evidence)
    assert error < 0.01 * exact_z
    assert abs(mean - exact_z) < 4 * error, (mean, exact_z, error)
    # The weights do vary, and log Z_hat is biased low even though Z_hat is not (Jensen).
    assert np.std(np.asarray(evidence.log_weights)) > 0.1
    assert np.mean(np.asarray(evidence.log_weights)) < math.log(exact_z) - 0.01

    def drifting_transition(rng_key, position, log_density_fn):
        return position + 0.3  # not invariant: the estimate must come out biased

    broken = ais(
        jax.random.PRNGKey(0),
        conjugate_gaussian_model,
        (y,),
        transition=drifting_transition,
        **settings,
    )
    broken_mean, broken_error = mean_and_error(broken)
    assert abs(broken_mean - exact_z) > 4 * broken_error


def test_gaussian_log_z_from_prior_and_from_gaussian_base():
    y = jnp.array([1.0, -2.0, 0.5])
    truth = conjugate_gaussian_log_z(y)
    prior_run = ais(jax.random.PRNGKey(1), conjugate_gaussian_model, (y,), base="prior", **RUN)
    assert_within_error(prior_run, truth, 0.1)
    # A base near (not at) the posterior N(0.8 y, 0.8 I): the geometric path from it.
    base = nx.GaussianBase(0.6 * y, 1.2 * jnp.eye(3), jnp.asarray(0.0))
    base_run = ais(jax.random.PRNGKey(2), conjugate_gaussian_model, (y,), base=base, **RUN)
    assert_within_error(base_run, truth, 0.05)


def test_mixture_base_density_matches_the_tempering_base():
    """The annealing path's base potential is the MixtureBase's (and a GaussianBase's, one
    component), exactly."""
    mixture = nx.MixtureBase(
        jnp.array([[-2.0, 0.5], [1.5, 1.0]]),
        jnp.array([[[1.0, 0.0], [0.4, 0.7]], [[0.5, 0.0], [-0.2, 1.3]]]),
        jnp.log(jnp.array([0.3, 0.7])),
        jnp.asarray(0.0),
    )
    gaussian = nx.GaussianBase(jnp.array([0.5, -1.0]), jnp.array([[0.7, 0.0], [0.2, 1.4]]), 0.0)
    for base in (mixture, gaussian):
        parameters = model_annealing.base_parameters(base)
        for point in jax.random.normal(jax.random.PRNGKey(0), (4, 2)) * 2:
            np.testing.assert_allclose(
                model_annealing.base_parameters_potential(parameters, point),
                base.potential(point),
                rtol=1e-10,
            )


def test_default_base_covers_both_modes_of_a_bimodal_target(monkeypatch):
    """0.6 N(-8, 1) + 0.4 N(8, 2^2) with log Z = 2: the default base's probe fits find both
    modes, so the run starts from fit_base's mixture and is right; from one Gaussian on the left
    mode the particles never reach the right one (log Z low by log(1 / 0.6))."""
    log_z = 2.0
    spy = FitSpy(monkeypatch)
    run = ais(jax.random.PRNGKey(1), bimodal_model, (log_z,), **RUN)
    probe = dict(num_starts=model_annealing.NUM_PROBE_FITS, bootstrap_rounds=0)
    assert spy.calls == [dict(probe, progress_bar=False), dict(progress_bar=False)]
    # The model is flattened once for both fits.
    assert spy.flat_models[0] is not None and spy.flat_models[0] is spy.flat_models[1]
    assert_within_error(run, log_z, 0.05)
    one_mode = nx.GaussianBase(jnp.array([-8.0]), jnp.array([[1.0]]), jnp.asarray(0.0))
    # The target is all prior, so importance sampling from the prior is exact and shows the
    # missed mode.
    with pytest.warns(UserWarning, match="misses posterior mass that the prior reaches"):
        missed = ais(jax.random.PRNGKey(1), bimodal_model, (log_z,), base=one_mode, **RUN)
    assert missed.log_z < log_z + math.log(0.6) + 0.1
    assert any("a mode the base does not cover" in problem for problem in missed.problems)
    # Importance sampling from this prior is exact, so the stderr is raised to the whole gap.
    assert missed.stderr == pytest.approx(log_z - missed.log_z)


@pytest.fixture(scope="module")
def regression():
    features, targets = make_linear_regression_data(0, num_data=30, num_features=3)
    return features, targets, linear_regression_log_evidence(features, targets)


def test_linear_regression_log_z_from_prior_and_fitted_base(regression):
    features, targets, truth = regression
    settings = dict(num_particles=500, num_temperatures=200, progress_bar=False)
    prior_run = ais(
        jax.random.PRNGKey(3),
        linear_regression_model,
        (features, targets),
        base="prior",
        **settings,
    )
    assert_within_error(prior_run, truth, 0.15)
    base = nx.fit_base(
        jax.random.PRNGKey(4),
        linear_regression_model,
        (features, targets),
        method="gaussian",
        num_steps=500,
        elbo_particles=200,
        progress_bar=False,
    )
    base_run = ais(
        jax.random.PRNGKey(5),
        linear_regression_model,
        (features, targets),
        base=base,
        schedule="linear",
        **settings,
    )
    assert_within_error(base_run, truth, 0.05)


def vague_prior_model(y=3.0):
    x = numpyro.sample("x", dist.Normal(0.0, 1e4))
    numpyro.sample("y", dist.Normal(x, 1e4), obs=y)


def test_a_posterior_as_wide_as_a_vague_prior_gets_its_log_z():
    """The default base follows a posterior of sd 7071 (a vague prior, a vague likelihood):
    from a base too narrow, AIS's particles never spread to its width, and log Z is low with a
    small standard error."""
    exact = float(norm(0.0, math.sqrt(2e8)).logpdf(3.0))  # -10.476
    estimate = ais(
        jax.random.PRNGKey(0),
        vague_prior_model,
        num_particles=128,
        num_temperatures=50,
        progress_bar=False,
    )
    assert float(estimate.stderr) < 0.05
    assert abs(float(estimate.log_z) - exact) < 4 * float(estimate.stderr) + 1e-3


def _backend_compilations(run):
    """The number of XLA compilations while ``run()`` runs."""
    compilations = []

    def listener(event, duration, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compilations.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        run()
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    return len(compilations)


def test_repeated_calls_reuse_the_compiled_run_and_new_data_rebuild_it():
    y = jnp.array([1.3, -0.4])
    other_y = jnp.array([4.0, 2.5])
    settings = dict(RUN, num_particles=300, num_temperatures=50, base="prior")
    first = ais(jax.random.PRNGKey(3), conjugate_gaussian_model, (y,), **settings)
    compiled_before = compiled_annealing_chunk.cache_info()
    again = ais(jax.random.PRNGKey(3), conjugate_gaussian_model, (y,), **settings)
    compiled_after = compiled_annealing_chunk.cache_info()
    # The same functions come back from the cache, so the driver's compiled scan is reused ...
    assert compiled_after.hits == compiled_before.hits + 1
    assert compiled_after.misses == compiled_before.misses
    # ... and nothing else compiles again either (the prior draws included), whatever the key.
    run_with_another_key = lambda: ais(  # noqa: E731
        jax.random.PRNGKey(4), conjugate_gaussian_model, (y,), **settings
    )
    assert _backend_compilations(run_with_another_key) == 0
    np.testing.assert_array_equal(np.asarray(first.log_weights), np.asarray(again.log_weights))
    # ... while other data (same shapes) must not reuse the first data's path.
    other = ais(jax.random.PRNGKey(3), conjugate_gaussian_model, (other_y,), **settings)
    assert_within_error(first, conjugate_gaussian_log_z(y), 0.1)
    assert_within_error(other, conjugate_gaussian_log_z(other_y), 0.1)
    assert abs(other.log_z - first.log_z) > 1.0


def test_marginal_path_is_the_marginal_of_the_tempered_joint():
    # Summed out by funsor, against an explicit logsumexp over all 2^n assignments of the
    # un-marginalized model's log prior + beta * log likelihood (likelihood scaled inside).
    y = MIXTURE_DATA[:4]
    log_f = jax.jit(
        annealing_path(split_model(jax.random.PRNGKey(0), mixture_model, (y,), marginalize=("z",)))[
            0
        ]
    )
    joint = split_model(jax.random.PRNGKey(0), mixture_model, (y,))
    assignments = jnp.asarray(np.indices((2,) * 4).reshape(4, -1).T)
    for x in (jnp.array([-0.7]), jnp.array([1.4])):
        log_prior = jax.vmap(lambda z, x=x: joint.log_prior_fn(x, {"z": z}))(assignments)
        log_likelihood = jax.vmap(lambda z, x=x: joint.log_likelihood_fn(x, {"z": z}))(assignments)
        for beta in (0.0, 0.3, 0.8, 1.0):
            expected = logsumexp(np.asarray(log_prior + beta * log_likelihood))
            np.testing.assert_allclose(float(log_f((x, {}), beta)), expected, rtol=1e-10)
        tempered_marginal = float(log_f((x, {}), 0.0)) + 0.3 * (
            float(log_f((x, {}), 1.0)) - float(log_f((x, {}), 0.0))
        )
        assert abs(float(log_f((x, {}), 0.3)) - tempered_marginal) > 0.05


@pytest.mark.parametrize("marginalize", [(), ("black",)], ids=["gibbs", "mais"])
def test_ising_log_z(marginalize):
    # 16 spins, exact log Z by enumeration of the 2^16 states.
    temperature = 2.5
    truth = float(ising_lattice(4, temperature=temperature).log_partition())
    evidence = ais(
        jax.random.PRNGKey(6),
        ising_model,
        (4,),
        {"temperature": temperature},
        marginalize=marginalize,
        **RUN,
    )
    assert_within_error(evidence, truth, 0.05)


@pytest.mark.parametrize(
    "marginalize, base",
    [
        ((), "prior"),
        (("z",), "prior"),
        # The geometric path from a Gaussian base on mu, with z summed out inside.
        (("z",), nx.GaussianBase(jnp.array([0.5]), jnp.array([[0.8]]), jnp.asarray(0.0))),
    ],
    ids=["hmc_within_gibbs", "mais", "mais_from_gaussian_base"],
)
def test_mixture_with_discrete_assignments(marginalize, base):
    truth = mixture_log_z(MIXTURE_DATA)
    evidence = ais(
        jax.random.PRNGKey(7),
        mixture_model,
        (MIXTURE_DATA,),
        marginalize=marginalize,
        base=base,
        **RUN,
    )
    assert_within_error(evidence, truth, 0.1)


@pytest.mark.filterwarnings("ignore:AIS final ESS")  # the runs are short on purpose
def test_bidirectional_bounds_sandwich_the_truth(regression):
    features, targets, truth = regression
    # Exact posterior draws of the conjugate regression (prior N(0, I), unit noise).
    precision = np.eye(features.shape[1]) + features.T @ features
    covariance = np.linalg.inv(precision)
    mean = covariance @ features.T @ targets
    draws = multivariate_normal(mean, covariance).rvs(500, random_state=0)
    # Few annealing steps, so that the upper bound is visibly loose (with many the two meet at
    # log Z). From the prior, the forward bound on this small model is tight already.
    settings = dict(num_particles=500, num_temperatures=20, base="prior", progress_bar=False)
    forward = ais(jax.random.PRNGKey(8), linear_regression_model, (features, targets), **settings)
    backward = ais(
        jax.random.PRNGKey(9),
        linear_regression_model,
        (features, targets),
        reverse=True,
        init_samples={"w": jnp.asarray(draws)},
        **settings,
    )
    # A stochastic lower bound: never above the truth by more than its error.
    assert forward.stderr < 0.2
    assert forward.log_z < truth + 4.0 * forward.stderr
    assert truth - forward.log_z < 1.0
    assert 0.0 < backward.log_z - truth < 3.0


def test_non_finite_density_is_a_rejected_move():
    # The target is the prior restricted to x > 0: log Z = log 1/2. Particles that start at
    # x < 0 get zero weight; HMC proposals into x < 0 (density -inf) must be rejected.
    def half_line_model():
        x = numpyro.sample("x", dist.Normal(0.0, 1.0))
        numpyro.factor("cut", jnp.where(x > 0, 0.0, -jnp.inf))

    evidence = ais(
        jax.random.PRNGKey(10),
        half_line_model,
        num_particles=2000,
        num_temperatures=20,
        base="prior",
        progress_bar=False,
    )
    assert np.all(~np.isnan(np.asarray(evidence.log_weights)))
    assert_within_error(evidence, math.log(0.5), 0.05)


def test_user_transition():
    y = jnp.array([0.5, -1.0])

    def random_walk_metropolis(rng_key, position, log_density_fn):
        proposal_key, accept_key = jax.random.split(rng_key)
        proposal = position + 0.5 * jax.random.normal(proposal_key, position.shape)
        log_ratio = log_density_fn(proposal) - log_density_fn(position)
        accept = jnp.log(jax.random.uniform(accept_key)) < log_ratio
        return jnp.where(accept, proposal, position)

    evidence = ais(
        jax.random.PRNGKey(11),
        conjugate_gaussian_model,
        (y,),
        transition=random_walk_metropolis,
        base="prior",
        **RUN,
    )
    assert_within_error(evidence, conjugate_gaussian_log_z(y), 0.1)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(marginalize=("nope",)), "no sample site of that name"),
        (dict(marginalize=("mu",)), "continuous site"),
        (dict(marginalize=("y",)), "observed site"),
        (dict(num_particles=0), "num_particles must be a positive integer"),
        (dict(schedule=np.array([0.0, 0.5, 0.9])), "must start at 0 and end at 1"),
        (dict(reverse=True), "pass init_samples"),
        (dict(base=nx.GaussianBase(jnp.zeros(1), jnp.eye(1), 0.0)), "discrete latent sites"),
        (dict(reverse=True, init_samples={"z": jnp.zeros((4, 6))}), "lacks the latent sites"),
    ],
)
def test_bad_input(overrides, message):
    arguments = dict(num_particles=10, num_temperatures=5, progress_bar=False) | overrides
    with pytest.raises(ValueError, match=message):
        ais(jax.random.PRNGKey(0), mixture_model, (MIXTURE_DATA,), **arguments)


# ------------------------------------------------------------------------------------------------
# The default base: a Gaussian VI fit, cached; the ESS warning; quiet progress; German credit
# ------------------------------------------------------------------------------------------------


class FitSpy:
    """Counts the default base's fits, passing every call on to the real fit; the flat model
    each was given is kept apart from the other keyword arguments."""

    def __init__(self, monkeypatch):
        self.calls = []
        self.flat_models = []
        self.real = model_annealing.fit_base_with_warnings
        monkeypatch.setattr(model_annealing, "fit_base_with_warnings", self)

    def __call__(self, *args, **kwargs):
        self.flat_models.append(kwargs.get("flat_model"))
        self.calls.append({name: value for name, value in kwargs.items() if name != "flat_model"})
        return self.real(*args, **kwargs)


def test_default_base_is_a_cached_gaussian_fit(monkeypatch):
    # Data of this test only, so that no earlier test has fitted (and cached) a base for them.
    features, targets = make_linear_regression_data(11, num_data=40, num_features=4)
    truth = linear_regression_log_evidence(features, targets)
    spy = FitSpy(monkeypatch)
    settings = dict(num_particles=400, num_temperatures=50, progress_bar=False)
    key = jax.random.PRNGKey(12)
    evidence = ais(key, linear_regression_model, (features, targets), **settings)
    probe = dict(num_starts=model_annealing.NUM_PROBE_FITS, bootstrap_rounds=0)
    assert spy.calls == [dict(probe, progress_bar=False)]  # one mode: no full mixture fit
    # From the prior, this run size is off by several stderr (the bidirectional test below);
    # from the fit its weights are nearly equal.
    assert_within_error(evidence, truth, 0.02)
    assert evidence.ess > 0.9 * settings["num_particles"]

    compiled = compiled_annealing_chunk.cache_info()
    again = ais(key, linear_regression_model, (features, targets), **settings)
    assert len(spy.calls) == 1  # the identical call reuses the fitted base ...
    assert (
        compiled_annealing_chunk.cache_info().misses == compiled.misses
    )  # ... and the compiled run
    np.testing.assert_array_equal(np.asarray(again.log_weights), np.asarray(evidence.log_weights))

    # Another seed fits its own base (its seed comes from the key) on the same compiled run.
    other = ais(jax.random.PRNGKey(13), linear_regression_model, (features, targets), **settings)
    assert len(spy.calls) == 2
    assert compiled_annealing_chunk.cache_info().misses == compiled.misses
    assert_within_error(other, truth, 0.02)

    # A reverse run with the forward run's key anneals back to the same fitted base.
    precision = np.eye(features.shape[1]) + features.T @ features
    covariance = np.linalg.inv(precision)
    draws = multivariate_normal(covariance @ features.T @ targets, covariance).rvs(
        400, random_state=1
    )
    upper = ais(
        key,
        linear_regression_model,
        (features, targets),
        reverse=True,
        init_samples={"w": jnp.asarray(draws)},
        **settings,
    )
    assert len(spy.calls) == 2
    assert_within_error(upper, truth, 0.02)


def narrow_posterior_model(y):
    """x ~ N(0, 10^2 I_3), y ~ N(x, 0.05^2 I): a posterior 200 times narrower than the prior."""
    x = numpyro.sample("x", dist.Normal(0.0, 10.0).expand([3]).to_event(1))
    numpyro.sample("y", dist.Normal(x, 0.05).to_event(1), obs=y)


NARROW_DATA = jnp.array([1.0, -0.5, 2.0])


def test_small_ess_warns_with_the_numbers():
    with pytest.warns(UserWarning, match=r"AIS final ESS [\d.]+ of 200 particles") as caught:
        evidence = ais(
            jax.random.PRNGKey(14),
            narrow_posterior_model,
            (NARROW_DATA,),
            base="prior",
            num_particles=200,
            num_temperatures=5,
            progress_bar=False,
        )
    assert evidence.ess < 10
    message = str(caught[0].message)
    assert "unreliable" in message and "more temperatures or a better base" in message
    # The estimate carries the problem, for nx.compare's warning column.
    (problem,) = evidence.problems
    assert problem.startswith("final ESS") and problem in message


def test_good_run_is_quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evidence = ais(
            jax.random.PRNGKey(15),
            narrow_posterior_model,
            (NARROW_DATA,),
            num_particles=200,
            num_temperatures=20,
            progress_bar=False,
        )
    assert evidence.ess > 0.5 * 200
    assert evidence.problems == ()


def test_a_fitted_base_that_misses_the_funnels_neck_is_caught_by_the_prior():
    truth = centred_funnel_log_evidence(FUNNEL_DATA)
    with pytest.warns(UserWarning, match="importance sampling from the prior") as caught:
        evidence = ais(
            jax.random.PRNGKey(3),
            centred_funnel_model,
            (jnp.asarray(FUNNEL_DATA),),
            num_particles=300,
            num_temperatures=50,
            progress_bar=False,
        )
    # The warning is about a real failure, with an ESS that alone would not flag it: the
    # estimate is low by several times the annealing's own error of about 0.03 (in the message),
    # and the reported stderr, raised to the gap from the prior's estimate, covers it.
    assert truth - evidence.log_z > 0.15, (evidence, truth)
    assert evidence.ess > 0.05 * 300
    message = next(str(w.message) for w in caught if "from the prior" in str(w.message))
    annealing_stderr = float(message.split("annealing's ")[1].split(" +- ")[1].split(":")[0])
    assert annealing_stderr < 0.05 and truth - evidence.log_z > 4 * annealing_stderr
    assert abs(evidence.log_z - truth) < 1.96 * evidence.stderr, (evidence, truth)
    assert "base='prior'" in message and "reparameterise a funnel (non-centred)" in message
    assert any(problem in message for problem in evidence.problems)
    # The advice holds: annealing from the prior reaches the neck.
    assert_within_error(
        ais(
            jax.random.PRNGKey(3),
            centred_funnel_model,
            (jnp.asarray(FUNNEL_DATA),),
            base="prior",
            **RUN,
        ),
        truth,
        max_stderr=0.05,
    )


def test_progress_bar_false_prints_nothing(capfd):
    y = jnp.array([0.7, -0.2])
    settings = dict(num_particles=50, num_temperatures=10)
    # A key no other test uses, so that the base is fitted here (fit_base's bar included).
    key = jax.random.PRNGKey(16)
    ais(key, conjugate_gaussian_model, (y,), progress_bar=False, **settings)
    assert capfd.readouterr().err == ""
    ais(key, conjugate_gaussian_model, (y,), progress_bar=True, **settings)
    assert "annealing" in capfd.readouterr().err  # the bars do reach capfd


# By the benchmark's independent method (benchmarks/german_credit_benchmark.py, NumPy/SciPy
# only): the mode and Hessian of the log posterior, then 10^6 importance draws (seed 0) from a
# Student-t with 5 degrees of freedom at the mode with the inverse Hessian as scale matrix.
GERMAN_CREDIT_8_LOG_Z = -522.8859
GERMAN_CREDIT_8_STDERR = 0.0006


def test_german_credit_with_8_predictors():
    features, labels = load_german_credit(num_predictors=8)
    assert features.shape == (1000, 9) and set(np.unique(labels)) == {0.0, 1.0}
    np.testing.assert_allclose(features[:, 0], 1.0)
    np.testing.assert_allclose(features[:, 1:].mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(features[:, 1:].std(0), 1.0)
    evidence = ais(
        jax.random.PRNGKey(18),
        logistic_regression_model,
        (features, labels),
        num_particles=200,
        num_temperatures=50,
        progress_bar=False,
    )
    assert 0.0 < evidence.stderr < 0.03
    error = math.hypot(evidence.stderr, GERMAN_CREDIT_8_STDERR)
    assert abs(evidence.log_z - GERMAN_CREDIT_8_LOG_Z) < 4.0 * error, evidence
