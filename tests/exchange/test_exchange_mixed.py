"""Replica exchange over Gibbs sweeps (ACS on the discrete sites, HMC/NUTS on the continuous
ones) for models with both kinds of latent sites: a cold Ising ring coupled to a continuous
scale, against exact enumeration with the scale integrated out in closed form."""

import itertools

import arviz as az
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from exchange_targets import run
from numpyro.infer import HMC, NUTS

import numpyro_extras as nx
from numpyro_extras.exchange.discrete_moves import MixedRungState

pytestmark = pytest.mark.slow

# Six spins on a ring, coupled at 1.0 (two mirror modes, every spin up or every spin down) with a
# small field that makes the up mode heavier, observed through y ~ N(m M, noise), M the mean spin.
# Flipping every spin needs m to change sign at the same time: a Gibbs sweep (spins given m, then
# m given the spins) stays in the mode it starts in.
NUM_SPINS = 6
COUPLING = 1.0
FIELD = 0.05
NOISE = 0.5
DATA = jnp.array([0.9, 1.3, 1.1, 0.7])


def ising_scale_model(y):
    s = numpyro.sample("s", dist.Bernoulli(0.5).expand([NUM_SPINS]).to_event(1))
    spins = 2.0 * s - 1.0
    numpyro.factor("ising", COUPLING * jnp.sum(spins * jnp.roll(spins, 1)) + FIELD * jnp.sum(spins))
    m = numpyro.sample("m", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(m * jnp.mean(spins), NOISE), obs=y)


def _exact():
    """P(s_i = 1), the masses of positive and negative magnetisation, E[m] and log Z: the 2^6
    spin states enumerated, m integrated out (y | s ~ N(0, noise^2 I + M^2 1 1^T))."""
    y = np.asarray(DATA)
    n = y.size
    s = np.array(list(itertools.product([0, 1], repeat=NUM_SPINS)), float)
    spins = 2 * s - 1
    magnetisation = spins.mean(1)
    log_weights, means = [], []
    for row, value in zip(spins, magnetisation, strict=True):
        covariance = NOISE**2 * np.eye(n) + value**2 * np.ones((n, n))
        log_evidence = (
            -0.5 * y @ np.linalg.solve(covariance, y)
            - 0.5 * np.linalg.slogdet(2 * np.pi * covariance)[1]
        )
        energy = COUPLING * np.sum(row * np.roll(row, 1)) + FIELD * row.sum()
        log_weights.append(NUM_SPINS * np.log(0.5) + energy + log_evidence)
        means.append(value * y.sum() / NOISE**2 / (1 + n * value**2 / NOISE**2))
    log_weights = np.array(log_weights)
    log_z = np.logaddexp.reduce(log_weights)
    p = np.exp(log_weights - log_z)
    masses = np.array([p[magnetisation > 0].sum(), p[magnetisation < 0].sum()])
    return p @ s, masses, float(p @ np.array(means)), float(log_z)


def _mean_and_mcse(draws):
    """Mean over chains and draws, and ArviZ's MCSE of it."""
    dataset = az.convert_to_dataset({"x": draws})
    return draws.mean((0, 1)), np.asarray(az.mcse(dataset, method="mean")["x"])


@pytest.fixture(scope="module")
def mixed_run():
    kernel = nx.ReplicaExchange(ising_scale_model, inner_kernel=nx.ACS, num_replicas=8)
    return run(kernel, DATA, num_warmup=500, num_samples=3000, num_chains=4)


def test_cold_mixed_model_against_enumeration(mixed_run):
    marginals, masses, mean_m, log_z = _exact()
    samples = mixed_run.get_samples(group_by_chain=True)
    s = np.asarray(samples["s"], float)
    estimate, stderr = _mean_and_mcse(s)
    print("P(s = 1)", estimate, "exact", marginals, "stderr", stderr)
    assert np.all(stderr < 0.03)
    assert np.all(np.abs(estimate - marginals) < 4 * stderr)

    magnetisation = (2 * s - 1).sum(-1)
    modes = np.stack([magnetisation > 0, magnetisation < 0], -1).astype(float)
    mass_estimate, mass_stderr = _mean_and_mcse(modes)
    print("mode masses", mass_estimate, "exact", masses, "stderr", mass_stderr)
    assert np.all(mass_stderr < 0.03)
    assert np.all(np.abs(mass_estimate - masses) < 4 * mass_stderr)
    # every chain's posterior replica visits both mirror modes, carried across by swaps
    assert np.all(modes.mean(1) > 0.1)

    m_estimate, m_stderr = _mean_and_mcse(np.asarray(samples["m"])[..., None])
    print("E[m]", m_estimate, "exact", mean_m, "stderr", m_stderr)
    assert m_stderr[0] < 0.05
    assert abs(m_estimate[0] - mean_m) < 4 * m_stderr[0]

    evidence = nx.log_marginal_likelihood(mixed_run)
    print("log Z", evidence, "exact", log_z)
    assert evidence.stderr < 0.15
    assert abs(evidence.log_z - log_z) < 4 * evidence.stderr


def test_every_rung_tunes_and_adapts_its_own_moves(mixed_run):
    """Each rung has its own ACS schedule and NUTS step size; the hot rungs take larger ones
    (rung 0, renewed by prior draws, is neither tuned nor moved)."""
    inner = mixed_run.last_state.inner_state
    assert isinstance(inner, MixedRungState)
    step_sizes = np.asarray(inner.continuous.adapt_state.step_size)
    alpha_min = np.asarray(inner.discrete.schedule.step_sizes)[..., -1]
    print("NUTS step sizes", step_sizes, "alpha_min", alpha_min)
    assert np.all(step_sizes[:, 1] > 2 * step_sizes[:, -1])
    assert np.all(alpha_min[:, 1] > alpha_min[:, -1])
    diagnostics = nx.exchange_diagnostics(mixed_run)
    assert np.all(diagnostics.round_trips >= 5)
    assert not diagnostics.problems


def test_chain_methods_give_the_same_draws():
    """The same spins, and the same scale up to floating-point rounding (vmapped and unbatched
    HMC arithmetic may round differently)."""
    draws = {}
    for method in ("sequential", "vectorized"):
        dmala = nx.DMALA(ising_scale_model, grad_mode="gradient", inner_kernel=HMC, num_steps=3)
        kernel = nx.ReplicaExchange(ising_scale_model, inner_kernel=dmala, num_replicas=3)
        mcmc = run(kernel, DATA, num_warmup=10, num_samples=20, chain_method=method, seed=5)
        draws[method] = mcmc.get_samples(group_by_chain=True)
    np.testing.assert_array_equal(draws["sequential"]["s"], draws["vectorized"]["s"])
    np.testing.assert_allclose(draws["sequential"]["m"], draws["vectorized"]["m"], rtol=1e-9)
    assert not np.array_equal(draws["sequential"]["m"][0], draws["sequential"]["m"][1])


def _all_discrete_model():
    numpyro.sample("k", dist.Bernoulli(0.5).expand([3]).to_event(1))


def test_bad_input_gets_a_clear_error():
    with pytest.raises(ValueError, match="model has none"):
        run(
            nx.ReplicaExchange(
                _all_discrete_model, inner_kernel=nx.ACS(_all_discrete_model, inner_kernel=NUTS)
            ),
            num_warmup=2,
            num_samples=2,
        )
    with pytest.raises(ValueError, match="latent sites"):
        run(
            nx.ReplicaExchange(ising_scale_model, inner_kernel=nx.ACS, num_replicas=4),
            DATA,
            num_warmup=2,
            num_samples=2,
            num_chains=1,
            init_params={"s": jnp.ones(NUM_SPINS)},
        )
