"""The functional core of replica exchange run without NumPyro's MCMC: ``jax.lax.scan`` of
``kernel(rng_key, state)`` on a Gaussian likelihood with a Gaussian prior, whose posterior moments
and ``log Z`` are exact, and the shell's draws against the core's on the same keys."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.stats import norm
from numpyro.diagnostics import effective_sample_size

from numpyro_extras.exchange import replica_exchange
from numpyro_extras.exchange.chains import hmc_moves
from numpyro_extras.exchange.core import LadderInfo, LadderState, build_kernel, init
from numpyro_extras.exchange.evidence import stepping_stone
from numpyro_extras.exchange.ladder import tuning_rounds
from numpyro_extras.exchange.path import TemperedPath

PRIOR_SCALE = 1.5
NOISE_SCALE = 0.6
DATA = np.array([0.8, -1.7])
NUM_REPLICAS = 6
NUM_CHAINS = 4
NUM_WARMUP = 200
NUM_SAMPLES = 1000
HMC_SETTINGS = {"num_steps": 5}


def _path():
    def reference_potential_fn(x):
        return -jnp.sum(norm.logpdf(x, 0.0, PRIOR_SCALE), -1)

    def log_likelihood_fn(x):
        return jnp.sum(norm.logpdf(DATA, x, NOISE_SCALE), -1)

    def sample_reference_fn(rng_key):
        return PRIOR_SCALE * jax.random.normal(rng_key, DATA.shape)

    return TemperedPath(reference_potential_fn, log_likelihood_fn, sample_reference_fn, "prior")


def _exact():
    """Posterior mean, variance and log Z of the conjugate Gaussian model."""
    precision = 1 / PRIOR_SCALE**2 + 1 / NOISE_SCALE**2
    mean = DATA / NOISE_SCALE**2 / precision
    log_z = np.sum(norm.logpdf(DATA, 0.0, np.sqrt(PRIOR_SCALE**2 + NOISE_SCALE**2)))
    return mean, np.full(DATA.shape, 1 / precision), float(log_z)


@pytest.fixture(scope="module")
def core_run():
    moves = hmc_moves(_path(), "HMC")
    kernel = build_kernel(moves, NUM_WARMUP)
    positions = jax.random.normal(jax.random.PRNGKey(0), (NUM_CHAINS, NUM_REPLICAS, 2))
    init_keys = jax.random.split(jax.random.PRNGKey(1), NUM_CHAINS)
    step_keys = jax.random.split(jax.random.PRNGKey(2), (NUM_WARMUP + NUM_SAMPLES, NUM_CHAINS))

    @jax.jit
    def run(positions, init_keys, step_keys):
        states = jax.vmap(lambda x, key: init(x, moves, key, NUM_WARMUP, **HMC_SETTINGS))(
            positions, init_keys
        )

        def scan(states, keys):
            states, info = jax.vmap(kernel)(keys, states)
            return states, (states.replicas.position[:, -1], states.replicas.log_likelihood, info)

        return jax.lax.scan(scan, states, step_keys)

    return run(positions, init_keys, step_keys)


def test_posterior_draws_match_the_exact_moments(core_run):
    """The beta = 1 replica's mean and variance within 4 Monte Carlo standard errors."""
    _, (draws, _, _) = core_run
    draws = np.swapaxes(np.asarray(draws[NUM_WARMUP:]), 0, 1)  # (chains, draws, D)
    mean, variance, _ = _exact()
    mean_error = np.sqrt(variance / effective_sample_size(draws))
    np.testing.assert_array_less(np.abs(draws.mean((0, 1)) - mean), 4 * mean_error)
    squares = (draws - mean) ** 2
    square_error = np.sqrt(2 * variance**2 / effective_sample_size(squares))
    np.testing.assert_array_less(np.abs(squares.mean((0, 1)) - variance), 4 * square_error)


def test_stepping_stone_over_the_ladder_matches_the_exact_log_z(core_run):
    states, (_, log_likelihood, _) = core_run
    log_likelihood = np.swapaxes(np.asarray(log_likelihood[NUM_WARMUP:]), 0, 1)
    estimate = stepping_stone(log_likelihood, np.asarray(states.betas))
    assert abs(estimate.log_z - _exact()[2]) < 4 * estimate.stderr + 1e-3


def test_state_and_info_shapes(core_run):
    """The state keeps the ladder's shapes, the info has one entry per scan, chain and gap or
    rung, and the ladder is re-tuned exactly at the ends of the tuning rounds."""
    states, (_, _, info) = core_run
    assert isinstance(states, LadderState) and isinstance(info, LadderInfo)
    scans = NUM_WARMUP + NUM_SAMPLES
    assert states.betas.shape == (NUM_CHAINS, NUM_REPLICAS)
    assert states.replicas.position.shape == (NUM_CHAINS, NUM_REPLICAS, 2)
    assert states.statistics.accept_sum.shape == (NUM_CHAINS, NUM_REPLICAS - 1)
    np.testing.assert_array_equal(states.iteration, scans)
    assert info.swap_accept_prob.shape == (scans, NUM_CHAINS, NUM_REPLICAS - 1)
    assert info.swap_source.shape == (scans, NUM_CHAINS, NUM_REPLICAS)
    assert info.reference_renewed.shape == info.ladder_retuned.shape == (scans, NUM_CHAINS)
    np.testing.assert_array_equal(
        np.sort(info.swap_source, -1), np.broadcast_to(np.arange(NUM_REPLICAS), (scans, 4, 6))
    )
    retuned_at = np.flatnonzero(np.asarray(info.ladder_retuned).all(1)) + 1
    np.testing.assert_array_equal(retuned_at, tuning_rounds(NUM_WARMUP))
    assert np.asarray(info.reference_renewed).all()
    assert np.all((info.swap_accept_prob >= 0) & (info.swap_accept_prob <= 1))
    np.testing.assert_array_equal(states.betas[:, [0, -1]], [[0.0, 1.0]] * NUM_CHAINS)


def test_the_shell_draws_what_the_core_draws_on_the_chain_keys():
    """``replica_exchange``'s state holds the core's state run on the keys the shell derives
    from the chain key: the inner kernel's from its first split, then each scan's from the
    chain key, carried on as key 0 of its four-way split (equal up to rounding: the two are
    compiled as different programs)."""
    moves = hmc_moves(_path(), "HMC")
    num_warmup = 20
    init_fn, step_fn = replica_exchange(moves, lambda x: {"x": x}, num_replicas=NUM_REPLICAS)
    positions = jax.random.normal(jax.random.PRNGKey(3), (NUM_REPLICAS, 2))
    key = jax.random.PRNGKey(4)
    shell = init_fn(positions, key, num_warmup, **HMC_SETTINGS)
    inner_key, chain_key = jax.random.split(key)
    core = init(positions, moves, inner_key, num_warmup, **HMC_SETTINGS)
    kernel = jax.jit(build_kernel(moves, num_warmup))
    step = jax.jit(step_fn, static_argnums=1)
    for _ in range(30):
        shell = step(shell, num_warmup)
        core, info = kernel(chain_key, core)
        chain_key = jax.random.split(chain_key, 4)[0]
    for leaf, expected in zip(jax.tree.leaves(shell.ladder), jax.tree.leaves(core), strict=True):
        np.testing.assert_allclose(leaf, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(shell.rng_key, chain_key)
    np.testing.assert_allclose(shell.swap_accept_prob, info.swap_accept_prob, rtol=1e-10)
    np.testing.assert_allclose(shell.z["x"], core.replicas.position[-1], rtol=1e-10)
    np.testing.assert_allclose(shell.log_likelihood, core.replicas.log_likelihood, rtol=1e-10)
    # The chain moved: its posterior replica left its start.
    assert not np.allclose(shell.z["x"], positions[-1])
