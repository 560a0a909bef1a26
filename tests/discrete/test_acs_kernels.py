"""ACS and DMALA as NumPyro kernels: exact marginals, tuner claims, chain methods, bad input."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS

import numpyro_extras as nx

# A cyclical schedule for the tests whose point is not the tuner (it saves the tuner's compile).
CYCLE = (np.asarray(nx.discrete.cyclical_step_sizes(3.0, 0.4, 5)), [0.9, 0.8, 0.7, 0.6, 0.5])


def _batch_means_stderr(draws, num_batches=20):
    """Monte Carlo standard error of the mean of (chains, draws, ...) by batch means."""
    chains, length = draws.shape[:2]
    batches = draws[:, : length - length % num_batches].reshape(
        (chains, num_batches, -1) + draws.shape[2:]
    )
    means = batches.mean(2).reshape((chains * num_batches,) + draws.shape[2:])
    return means.mean(0), means.std(0, ddof=1) / np.sqrt(means.shape[0])


def _run(
    kernel,
    *args,
    num_warmup=100,
    num_samples=2000,
    num_chains=4,
    method="vectorized",
    seed=0,
    extra_fields=(),
):
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=method,
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(seed), *args, extra_fields=extra_fields)
    return mcmc


def _enumerate_binary(num_units):
    return np.array(list(itertools.product([0.0, 1.0], repeat=num_units)))


@pytest.mark.slow
def test_rbm_marginals_and_tuner_claims():
    """Joint RBM (8 visible + 4 hidden Bernoulli sites in plates) against exact enumeration of
    its 4096 states; the tuner's acceptance at both ends of the cycle near its target."""
    machine = nx.random_rbm(jax.random.PRNGKey(1), 8, 4, inverse_temperature=4.0, units="binary")
    # alpha_ceil above the paper's 5: on 12 units even alpha = 5 accepts more than rho* = 0.5.
    kernel = nx.ACS(nx.rbm_model, alpha_ceil=50.0, tuning_settings={"alpha_max_rule": "acceptance"})
    mcmc = _run(kernel, machine, extra_fields=("accept_prob", "alpha", "beta"))
    samples = mcmc.get_samples(group_by_chain=True)
    assert samples["v"].dtype == jnp.result_type(int) and samples["v"].shape == (4, 2000, 8)

    states = _enumerate_binary(12)
    v, h = states[:, :8], states[:, 8:]
    log_p = np.asarray(machine.log_density(jnp.asarray(v), jnp.asarray(h)))
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    exact = p @ states
    draws = np.concatenate([samples["v"], samples["h"]], -1).astype(float)
    estimate, stderr = _batch_means_stderr(draws)
    assert np.all(stderr < 0.03)
    assert np.all(np.abs(estimate - exact) < 4 * stderr + 1e-3), (estimate, exact, stderr)

    tuning = mcmc.last_state.tuning
    assert np.all(tuning.alpha_max > tuning.alpha_min)
    assert abs(float(np.mean(tuning.accept_at_max)) - 0.5) < 0.15
    assert abs(float(np.mean(tuning.accept_at_min)) - 0.5) < 0.15
    betas = np.asarray(tuning.schedule.balancing)
    assert np.all(np.diff(betas, axis=-1) <= 0)
    assert np.all(betas[:, 0] == 0.95) and np.all(betas[:, -1] == 0.5)
    # The extra fields follow the frozen schedule, cycle after cycle.
    fields = mcmc.get_extra_fields(group_by_chain=True)
    alphas = np.asarray(tuning.schedule.step_sizes)
    s = alphas.shape[-1]
    first_kept = 100  # num_warmup: draw j is transition num_warmup + j + 1, index (. - 1) % s
    index = (first_kept + np.arange(2000)) % s
    np.testing.assert_allclose(fields["alpha"], alphas[:, index])
    np.testing.assert_allclose(fields["beta"], betas[:, index])
    accept = np.asarray(fields["accept_prob"])
    assert np.all((accept >= 0) & (accept <= 1))
    # Acceptance while sampling at both ends of the cycle: the tuner's estimates come from its
    # own short runs, so this is looser than the tuner's own 0.15.
    print("alpha_max", tuning.alpha_max, "alpha_min", tuning.alpha_min)
    print("tuner acceptance", tuning.accept_at_max, tuning.accept_at_min)
    print("sampling acceptance", accept[:, index == 0].mean(), accept[:, index == s - 1].mean())
    assert abs(accept[:, index == 0].mean() - 0.5) < 0.25
    assert abs(accept[:, index == s - 1].mean() - 0.5) < 0.25


def _ising_expand_model(coupling, field):
    """A 4 x 4 periodic Ising lattice with one site written as .expand([16]).to_event(1)."""
    size = 4
    rows, cols = np.divmod(np.arange(16), size)
    right = rows * size + (cols + 1) % size
    down = ((rows + 1) % size) * size + cols

    def model():
        x = numpyro.sample("spins", dist.Bernoulli(0.5).expand([16]).to_event(1))
        s = 2.0 * x - 1.0
        numpyro.factor("energy", coupling * jnp.sum(s * (s[right] + s[down])) + field * s.sum())

    return model, right


def test_ising_marginals_with_expanded_site():
    """16-spin Ising model (site written with .expand().to_event(1)) against the exact 2^16
    enumeration: magnetisation per spin and nearest-neighbour correlation."""
    coupling, field = 0.3, 0.1
    model, right = _ising_expand_model(coupling, field)
    mcmc = _run(nx.ACS(model, schedule=CYCLE), num_samples=2000)
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["spins"], float)
    spins = 2 * x - 1

    states = 2 * _enumerate_binary(16) - 1
    rows, cols = np.divmod(np.arange(16), 4)
    down = ((rows + 1) % 4) * 4 + cols
    log_p = coupling * np.sum(
        states * (states[:, right] + states[:, down]), 1
    ) + field * states.sum(1)
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    exact = np.concatenate([p @ states, [p @ np.mean(states * states[:, right], 1)]])
    draws = np.concatenate([spins, np.mean(spins * spins[..., right], -1, keepdims=True)], -1)
    estimate, stderr = _batch_means_stderr(draws)
    assert np.all(stderr < 0.06)
    assert np.all(np.abs(estimate - exact) < 4 * stderr), (estimate, exact, stderr)


def _categorical_model(onehot):
    unary = jnp.array([[0.5, -1.0, 0.3, 1.2], [0.0, 0.8, -0.4, 0.1], [1.0, -0.5, 0.2, 0.0]])
    pair = jax.random.normal(jax.random.PRNGKey(5), (4, 4))

    def model():
        with numpyro.plate("coordinates", 3):
            if onehot:
                c = numpyro.sample("c", nx.OneHotCategorical(logits=unary))
            else:
                c = jax.nn.one_hot(numpyro.sample("c", dist.Categorical(logits=unary)), 4)
        numpyro.factor("pair", c[0] @ pair @ c[1] + c[1] @ pair @ c[2])

    log_unary = jax.nn.log_softmax(unary, -1)
    exact = np.zeros((3, 4))
    weights = []
    for classes in itertools.product(range(4), repeat=3):
        c = np.eye(4)[list(classes)]
        log_w = sum(log_unary[i, k] for i, k in enumerate(classes))
        log_w += c[0] @ pair @ c[1] + c[1] @ pair @ c[2]
        weights.append((np.exp(log_w), c))
    total = sum(w for w, _ in weights)
    for w, c in weights:
        exact += w * c / total
    return model, exact


@pytest.mark.parametrize("onehot", [False, True])
def test_categorical_sites_against_enumeration(onehot):
    """Categorical sites (exact differences) and one-hot sites (gradients): class marginals."""
    model, exact = _categorical_model(onehot)
    kernel = nx.ACS(model, schedule=CYCLE)
    mcmc = _run(kernel, num_samples=1500)
    assert kernel.variables["c"].gradient is onehot
    c = np.asarray(mcmc.get_samples(group_by_chain=True)["c"])
    onehots = c if onehot else np.eye(4)[c]
    if onehot:
        assert c.shape == (4, 1500, 3, 4)
    else:
        assert c.shape == (4, 1500, 3) and c.dtype == jnp.result_type(int)
    estimate, stderr = _batch_means_stderr(onehots)
    assert np.all(stderr < 0.04)
    assert np.all(np.abs(estimate - exact) < 4 * stderr + 1e-3), (estimate, exact)


def _mixture_model(y, scale):
    def model():
        mu = numpyro.sample("mu", dist.Normal(0.0, scale))
        with numpyro.plate("data", len(y)):
            z = numpyro.sample("z", dist.Bernoulli(0.5))
            numpyro.sample("y", dist.Normal((2.0 * z - 1.0) * mu, 1.0), obs=y)

    return model


def _mixture_checks(y, scale, z, mu):
    """Exact and estimated posterior quantities of :func:`_mixture_model`, with their stderr.

    ``p(z | y)`` and ``E[mu | z, y]`` are in closed form (``mu`` integrated out). The posterior
    is symmetric under ``(z, mu) -> (1 - z, -mu)``, so the checks are quantities that symmetry
    leaves alone: ``E[z_n == z_m]`` and ``E[(2 z_n - 1) mu]``.
    """
    configurations = _enumerate_binary(3)
    log_w, mean_mu = [], []
    for config in configurations:
        s = 2 * config - 1
        covariance = np.eye(3) + scale**2 * np.outer(s, s)
        inverse = np.linalg.inv(covariance)
        log_w.append(-0.5 * y @ inverse @ y - 0.5 * np.linalg.slogdet(covariance)[1])
        mean_mu.append(scale**2 * s @ inverse @ y)
    w = np.exp(np.array(log_w) - max(log_w))
    w /= w.sum()
    same = np.array([[1.0 * (c[0] == c[1]), 1.0 * (c[1] == c[2])] for c in configurations])
    signed_mu = np.array([(2 * c - 1) * m for c, m in zip(configurations, mean_mu, strict=True)])
    exact = np.concatenate([w @ same, w @ signed_mu])
    draws = np.concatenate(
        [
            np.stack([z[..., 0] == z[..., 1], z[..., 1] == z[..., 2]], -1).astype(float),
            (2 * z - 1) * mu[..., None],
        ],
        -1,
    )
    estimate, stderr = _batch_means_stderr(draws)
    return exact, estimate, stderr


def test_mixed_discrete_and_continuous_against_exact_posterior():
    """Signed mixture y_n ~ N(s_n mu, 1), s_n = 2 z_n - 1, mu ~ N(0, 2^2): ACS on z
    alternating with NUTS on mu, against the closed-form posterior."""
    y = np.array([1.5, -0.7, 2.2])
    scale = 2.0
    mcmc = _run(
        nx.ACS(_mixture_model(y, scale), inner_kernel=NUTS, schedule=CYCLE),
        num_warmup=300,
        num_samples=1500,
    )
    samples = mcmc.get_samples(group_by_chain=True)
    exact, estimate, stderr = _mixture_checks(
        y, scale, np.asarray(samples["z"], float), np.asarray(samples["mu"])
    )
    assert np.all(stderr < 0.1)
    assert np.all(np.abs(estimate - exact) < 4 * stderr), (estimate, exact, stderr)


@pytest.mark.slow
def test_inner_kernel_tunes_where_the_continuous_site_is():
    """The discrete conditional of this model is near-deterministic for most prior draws of
    ``mu`` (a field ``4 mu`` on every site) but not at its posterior (``mu`` about 0.3): tuned
    with ``mu`` still at its prior draw, the ``alpha_min`` search never reaches the target and
    runs away (to thousands on some chains). With an inner kernel the tuner runs after ``mu``
    has moved, and finds the schedule that a tuner at ``mu = 0.3`` finds."""
    observed_mu = 0.3

    def model():
        mu = numpyro.sample("mu", dist.Normal(0.0, 3.0))
        numpyro.sample("obs", dist.Normal(mu, 0.05), obs=observed_mu)
        with numpyro.plate("sites", 20):
            z = numpyro.sample("z", dist.Bernoulli(0.5))
        numpyro.factor("field", 4.0 * mu * jnp.sum(2.0 * z - 1.0))

    def tuning(kernel):
        mcmc = _run(kernel, num_warmup=1, num_samples=1, num_chains=6)
        return mcmc.last_state.tuning

    fixed = tuning(nx.ACS(numpyro.handlers.condition(model, {"mu": observed_mu})))
    mixed = tuning(nx.ACS(model, inner_kernel=NUTS))
    # The chains of the fixed-mu tuner (0.47-0.53 with these keys) spread about 0.03 around
    # their median; mu's posterior sd of 0.05 moves the target's alpha_min by about as much.
    reference = np.median(np.asarray(fixed.alpha_min))
    assert np.all(np.abs(np.asarray(mixed.alpha_min) - reference) < 0.2), (
        mixed.alpha_min,
        fixed.alpha_min,
    )
    assert np.all(np.asarray(mixed.alpha_max) <= 5.0)


@pytest.mark.parametrize("kernel_class", [nx.ACS, nx.DMALA])
def test_block_of_numpyro_gibbs_against_exact_posterior(kernel_class):
    """The same signed mixture with NumPyro's own composite kernel: ACS (or DMALA) on the
    discrete sites, NUTS on the rest."""
    from numpyro.infer import Gibbs
    from numpyro.infer.gibbs import discrete_latent_sites

    y = np.array([1.5, -0.7, 2.2])
    scale = 2.0
    model = _mixture_model(y, scale)
    kernel = Gibbs([(kernel_class(model), discrete_latent_sites), (NUTS(model), None)])
    mcmc = _run(kernel, num_warmup=300, num_samples=2000, num_chains=2, method="sequential")
    samples = mcmc.get_samples(group_by_chain=True)
    assert set(samples) == {"z", "mu"}
    exact, estimate, stderr = _mixture_checks(
        y, scale, np.asarray(samples["z"], float), np.asarray(samples["mu"])
    )
    assert np.all(stderr < 0.1)
    assert np.all(np.abs(estimate - exact) < 4 * stderr), (estimate, exact, stderr)


def test_refresh_recomputes_the_conditional_at_the_current_draw():
    """A Gibbs block's cached log density follows new conditioning values exactly."""
    from numpyro.infer.gibbs import GIBBS_SITES_KWARG, conditioned

    y = np.array([1.5, -0.7, 2.2])
    model = _mixture_model(y, 2.0)
    kernel = nx.ACS(model, schedule=CYCLE).wrap_model(conditioned)
    kwargs = {GIBBS_SITES_KWARG: {"mu": jnp.array(0.3)}}
    state = kernel.init(jax.random.PRNGKey(0), 10, None, (), kwargs)
    new_kwargs = {GIBBS_SITES_KWARG: {"mu": jnp.array(-1.2)}}
    refreshed = kernel.refresh(state, (), new_kwargs)
    s = 2.0 * np.asarray(state.z["z"], float) - 1.0
    exact = (
        dist.Normal(0.0, 2.0).log_prob(-1.2)
        + 3 * np.log(0.5)
        + dist.Normal(s * -1.2, 1.0).log_prob(y).sum()
    )
    np.testing.assert_allclose(refreshed.chain.log_density, exact, rtol=1e-6)
    np.testing.assert_array_equal(refreshed.z["z"], state.z["z"])
    stepped = kernel.sample(refreshed, (), new_kwargs)
    assert np.isfinite(stepped.chain.log_density)


def _tiny_model():
    with numpyro.plate("units", 5):
        x = numpyro.sample("x", dist.Bernoulli(0.5))
    numpyro.factor("f", 0.8 * jnp.sum(x[:-1] * x[1:]) - 0.3 * jnp.sum(x))


@pytest.mark.slow
def test_chain_methods_agree_and_dmala_is_acs_at_half():
    """sequential, parallel and vectorized chains, tuner included, give the same draws from the
    same key; DMALA equals ACS with a constant schedule at beta = 0.5 bit for bit."""
    small_tuner = dict(steps_per_cycle=4, tuning_settings={"budget": 40}, num_tuning_chains=8)
    runs = {}
    for method in ("sequential", "parallel", "vectorized"):
        mcmc = _run(
            nx.ACS(_tiny_model, **small_tuner),
            num_warmup=10,
            num_samples=300,
            num_chains=2,
            method=method,
        )
        runs[method] = np.asarray(mcmc.get_samples()["x"])
        assert np.all(np.asarray(mcmc.last_state.tuning.alpha_max) > 0)
    np.testing.assert_array_equal(runs["sequential"], runs["vectorized"])
    np.testing.assert_array_equal(runs["sequential"], runs["parallel"])
    assert runs["sequential"].std() > 0

    def draws(kernel):
        mcmc = _run(kernel, num_warmup=10, num_samples=300, num_chains=1)
        return np.asarray(mcmc.get_samples()["x"])

    constant = draws(nx.ACS(_tiny_model, schedule=([0.7] * 3, [0.5] * 3)))
    np.testing.assert_array_equal(draws(nx.DMALA(_tiny_model, step_size=0.7)), constant)


def test_potential_fn_entry_on_ordinal_target():
    """A pure-JAX ordinal target through potential_fn (-log density), against enumeration."""
    modes = jnp.array([[1.0, 1.0], [6.0, 2.0]])

    def potential_fn(x):
        distances = jnp.sqrt(jnp.sum((x[None, :] - modes) ** 2, -1) + 0.1)
        return -jax.nn.logsumexp(-distances / 0.8)

    variable = nx.DiscreteVariable((2,), 8, "ordinal")
    schedule = ([40.0, 10.0, 2.0, 0.5], [0.7, 0.6, 0.5, 0.5])
    kernel = nx.ACS(potential_fn=potential_fn, variables=variable, schedule=schedule)
    mcmc = _run(kernel, num_samples=2000)
    x = np.asarray(mcmc.get_samples(group_by_chain=True), float)
    grid = np.array(list(itertools.product(range(8), repeat=2)), float)
    log_p = -np.array([potential_fn(jnp.asarray(g)) for g in grid])
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    estimate, stderr = _batch_means_stderr(x)
    assert np.all(stderr < 0.3)
    assert np.all(np.abs(estimate - p @ grid) < 4 * stderr)


def test_bad_input():
    def poisson_model():
        numpyro.sample("counts", dist.Poisson(3.0))
        numpyro.sample("flag", dist.Bernoulli(0.5))

    with pytest.raises(ValueError, match="'counts' is a Poisson"):
        _run(nx.ACS(poisson_model), num_samples=2, num_chains=1)

    def continuous_model():
        numpyro.sample("mu", dist.Normal())

    with pytest.raises(ValueError, match="has none"):
        _run(nx.ACS(continuous_model), num_samples=2, num_chains=1)
    with pytest.raises(ValueError, match="inner_kernel=NUTS"):
        _run(nx.ACS(_mixture_model(np.zeros(2), 1.0)), num_samples=2, num_chains=1)
    # An inner kernel on a model whose latent sites are all discrete has nothing to move.
    with pytest.raises(ValueError, match=r"has none .*nx\.ACS\(model\) without inner_kernel"):
        _run(nx.ACS(_tiny_model, inner_kernel=NUTS), num_samples=2, num_chains=1)
    with pytest.raises(ValueError, match="step_size must be a positive finite number, got 0.0"):
        nx.DMALA(_tiny_model, step_size=0.0)
    with pytest.raises(ValueError, match="step_size must be a positive finite number, got inf"):
        nx.DMALA(_tiny_model, step_size=float("inf"))
    for taken_as_a_number in ("0.2", True):
        with pytest.raises(TypeError, match="step_size must be a positive finite number"):
            nx.DMALA(_tiny_model, step_size=taken_as_a_number)
    with pytest.raises(TypeError, match="steps_per_cycle must be a positive integer, got 2.5"):
        nx.ACS(_tiny_model, steps_per_cycle=2.5)
    with pytest.raises(TypeError, match="schedule must be a pair .* got 'bogus'"):
        nx.ACS(_tiny_model, schedule="bogus")
    with pytest.raises(ValueError, match=r"target_accept_prob must be a probability in \(0, 1\)"):
        nx.ACS(_tiny_model, target_accept_prob=1.5)
    with pytest.raises(ValueError, match="num_tuning_sweeps must be >= 0"):
        nx.ACS(_tiny_model, num_tuning_sweeps=-1)
    with pytest.raises(ValueError, match="beta must lie in"):
        nx.ACS(_tiny_model, schedule=([1.0, 0.5], [0.9, 0.3]))
    with pytest.raises(ValueError, match="same length"):
        nx.ACS(_tiny_model, schedule=([1.0, 0.5], [0.9]))
    with pytest.raises(ValueError, match="Step sizes alpha must be positive"):
        nx.ACS(_tiny_model, schedule=([1.0, -0.5], [0.9, 0.5]))
    with pytest.raises(ValueError, match="steps_per_cycle"):
        nx.ACS(_tiny_model, steps_per_cycle=1)
    with pytest.raises(ValueError, match="beta_min <= beta_max"):
        nx.ACS(_tiny_model, beta_max=1.2)
    with pytest.raises(ValueError, match="alpha_floor < alpha_ceil"):
        nx.ACS(_tiny_model, alpha_floor=10.0, alpha_ceil=5.0)
    # Without alpha_ceil the ceiling depends on the model's sites: checked when the tuner runs.
    with pytest.raises(ValueError, match="alpha_floor < alpha_ceil"):
        MCMC(nx.ACS(_tiny_model, alpha_floor=10.0), num_warmup=1, num_samples=1).run(
            jax.random.PRNGKey(0)
        )
    with pytest.raises(ValueError, match="alpha_max_rule"):
        nx.ACS(_tiny_model, tuning_settings={"alpha_max_rule": "largest"})
    with pytest.raises(ValueError, match="grad_mode"):
        nx.ACS(_tiny_model, grad_mode="fast")
    with pytest.raises(ValueError, match="inner_kernel must be"):
        nx.ACS(_tiny_model, inner_kernel=dist.Normal)

    def indexing_model():
        x = numpyro.sample("x", dist.Bernoulli(0.5))
        numpyro.factor("f", jnp.array([0.0, 1.0])[x])

    with pytest.raises(ValueError, match="cannot be differentiated in the discrete site 'x'"):
        _run(nx.ACS(indexing_model, grad_mode="gradient"), num_samples=2, num_chains=1)
    kernel = nx.ACS(indexing_model, schedule=([1.0], [0.5]))
    _run(kernel, num_samples=5, num_chains=1)
    assert kernel.variables["x"].gradient is False  # "auto" fell back to exact differences
    with pytest.raises(ValueError, match="discrete_steps"):
        nx.ACS(_tiny_model, discrete_steps=0)


def test_auto_gradient_mode_keeps_gradients_only_where_they_are_faithful():
    """First-order differences are exact for an energy linear in each coordinate, blind for a
    value read through a comparison, and far off for a spike-and-slab scale: "auto" keeps the
    gradient for the first only."""

    def model():
        with numpyro.plate("units", 4):
            linear = numpyro.sample("linear", dist.Bernoulli(0.5))
            compared = numpyro.sample("compared", dist.Bernoulli(0.5))
            scaled = numpyro.sample("scaled", dist.Bernoulli(0.5))
        numpyro.factor("energy", 0.7 * jnp.sum(linear[:-1] * linear[1:]))
        numpyro.factor("comparison", jnp.sum(jnp.where(compared == 1, 2.0, -1.0)))
        numpyro.sample("beta", dist.Normal(0.0, 0.05 + scaled * 1.95), obs=jnp.full(4, 0.3))

    kernel = nx.ACS(model, schedule=CYCLE)
    _run(kernel, num_samples=2, num_chains=1)
    gradient = {name: variable.gradient for name, variable in kernel.variables.items()}
    assert gradient == {"linear": True, "compared": False, "scaled": False}


def test_auto_gradient_mode_falls_back_to_exact_differences_for_a_site_used_as_an_index():
    weights = jnp.array([0.2, -0.4, 1.0])

    def indexed():
        with numpyro.plate("units", 3):
            z = numpyro.sample("z", dist.Bernoulli(0.5))
        numpyro.factor("lookup", jnp.sum(weights[z]))

    kernel = nx.ACS(indexed, schedule=CYCLE)
    _run(kernel, num_samples=2, num_chains=1)
    assert kernel.variables["z"].gradient is False


def test_a_model_error_while_probing_for_gradients_is_not_taken_for_non_differentiability():
    def broken_for_floats():
        z = numpyro.sample("z", dist.Bernoulli(0.5).expand([3]).to_event(1))
        if jnp.issubdtype(jnp.result_type(z), jnp.floating):
            raise RuntimeError("the model's own bug")
        numpyro.factor("energy", jnp.sum(z))

    with pytest.raises(RuntimeError, match="the model's own bug"):
        _run(nx.ACS(broken_for_floats, schedule=CYCLE), num_samples=2, num_chains=1)


def _signal_model(observations):
    """Binary sites on a ring observed as ``N(2 (2 z - 1), 1)``: quadratic in each coordinate,
    so every first-order flip difference is off by the same 8 nats."""
    with numpyro.plate("sites", observations.shape[0]):
        z = numpyro.sample("z", dist.Bernoulli(0.5))
    spins = 2.0 * z - 1.0
    numpyro.factor("coupling", 0.5 * jnp.sum(spins * jnp.roll(spins, 1)))
    numpyro.sample("y", dist.Normal(2.0 * spins, 1.0), obs=observations)


def test_auto_gradient_mode_keeps_gradients_off_by_a_common_offset():
    """An error common to every move only shifts alpha, so "auto" keeps the gradient for a
    Gaussian likelihood of the spins (8 nats off per flip), yet not for a single site read
    through a comparison (its error changes sign with its value); the draws stay exact."""

    def compared_model():
        x = numpyro.sample("x", dist.Bernoulli(0.5))
        numpyro.factor("comparison", jnp.where(x == 1, 2.0, -1.0))

    kernel = nx.ACS(compared_model, schedule=CYCLE)
    _run(kernel, num_samples=2, num_chains=1)
    assert kernel.variables["x"].gradient is False

    observations = np.array([1.5, -0.5, 0.3, -2.0, 0.8, 0.1])
    kernel = nx.ACS(_signal_model)
    mcmc = _run(kernel, observations)
    assert kernel.variables["z"].gradient is True

    states = _enumerate_binary(6)
    spins = 2.0 * states - 1.0
    log_p = 0.5 * np.sum(spins * np.roll(spins, 1, -1), -1) - 0.5 * np.sum(
        (observations - 2.0 * spins) ** 2, -1
    )
    p = np.exp(log_p - log_p.max())
    exact = p @ states / p.sum()
    draws = np.asarray(mcmc.get_samples(group_by_chain=True)["z"], float)
    estimate, stderr = _batch_means_stderr(draws)
    assert np.all(np.abs(estimate - exact) < 4 * stderr + 1e-3), (estimate, exact, stderr)


def test_discrete_steps_per_transition():
    """With continuous sites a transition makes one whole schedule cycle of discrete moves by
    default; discrete_steps sets another number."""
    y = np.array([1.5, -0.7, 2.2])
    model = _mixture_model(y, 2.0)
    for discrete_steps, last_position in [(None, 4), (3, 2), (1, 0)]:
        kernel = nx.ACS(model, inner_kernel=NUTS, schedule=CYCLE, discrete_steps=discrete_steps)
        state = kernel.init(jax.random.PRNGKey(0), 10, None, (), {})
        state = kernel.sample(state, (), {})
        assert float(state.alpha) == pytest.approx(float(CYCLE[0][last_position]))


@pytest.mark.parametrize("kernel_class", [nx.ACS, nx.DMALA])
def test_potential_energy_extra_field_is_minus_the_log_joint(kernel_class):
    """``extra_fields=("potential_energy",)`` works as with NUTS: ``-log p`` at each draw."""
    mcmc = _run(
        kernel_class(_tiny_model),
        num_warmup=20,
        num_samples=30,
        num_chains=2,
        extra_fields=("potential_energy", "accept_prob"),
    )
    energies = np.asarray(mcmc.get_extra_fields()["potential_energy"])
    draws = mcmc.get_samples()["x"]
    expected = jax.vmap(
        lambda x: -numpyro.infer.util.log_density(_tiny_model, (), {}, {"x": x})[0]
    )(draws)
    assert energies.shape == (60,)
    np.testing.assert_allclose(energies, expected, rtol=1e-5, atol=1e-5)


def test_potential_energy_extra_field_with_an_inner_kernel():
    y = np.array([1.5, -0.7, 2.2])
    model = _mixture_model(y, 2.0)
    mcmc = _run(
        nx.ACS(model, inner_kernel=NUTS, schedule=CYCLE),
        num_warmup=20,
        num_samples=30,
        num_chains=2,
        extra_fields=("potential_energy",),
    )
    energies = np.asarray(mcmc.get_extra_fields()["potential_energy"])
    samples = mcmc.get_samples()
    # mu is unconstrained already (a real site): the joint log density is the model's.
    expected = jax.vmap(
        lambda z, mu: -numpyro.infer.util.log_density(model, (), {}, {"z": z, "mu": mu})[0]
    )(samples["z"], samples["mu"])
    np.testing.assert_allclose(energies, expected, rtol=1e-5, atol=1e-5)
