"""The functional core of continuous tempering without NumPyro's MCMC: the joint and Gibbs
kernels scanned over keys on a Gaussian target with a Gaussian base, where the posterior moments
and log Z are known in closed form; the info fields; and the NumPyro state built around the
core's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from arviz import mcse
from numpyro.infer import HMC, NUTS

import numpyro_extras as nx
from numpyro_extras.shell.kernel import hmc_settings
from numpyro_extras.tempering.chains import (
    GIBBS_KEYS,
    JOINT_KEYS,
    TemperingChainState,
    TemperingInfo,
    build_gibbs_kernel,
    build_joint_kernel,
    gibbs_init,
    joint_init,
)
from numpyro_extras.tempering.kernels import tempering_chain

MEAN = np.array([1.0, -0.5])
COVARIANCE = np.array([[0.8**2, 0.3], [0.3, 1.3**2]])
PRECISION = np.linalg.inv(COVARIANCE)
LOG_OFFSET = 2.5  # phi = -log N(x; MEAN, COVARIANCE) - LOG_OFFSET, so log Z = LOG_OFFSET
# A normalised base wider than the target, whose log zeta the warm-up has to correct.
BASE = nx.GaussianBase(jnp.zeros(2), 2.0 * jnp.eye(2), jnp.asarray(LOG_OFFSET - 1.5))
NUM_WARMUP, NUM_SAMPLES, NUM_CHAINS = 300, 1500, 2


def potential_fn(x):
    centred = x - MEAN
    log_norm = -0.5 * np.log(np.linalg.det(2 * np.pi * COVARIANCE))
    return 0.5 * centred @ PRECISION @ centred - log_norm - LOG_OFFSET


def joint_chain(replica_moves=True, inner_kernel=NUTS, **kernel_settings):
    """The core's ``(init, kernel)`` of joint tempering, with NUTS by default as the kernel's."""
    algo, settings = hmc_settings(inner_kernel, num_steps=None if inner_kernel is NUTS else 5)
    core = {"num_warmup": NUM_WARMUP, "algo": algo, "replica_moves": replica_moves, **settings}
    return (
        lambda x, key: joint_init(x, potential_fn, BASE, key, **core),
        build_joint_kernel(potential_fn, BASE, **core, **kernel_settings),
    )


def gibbs_chain(replica_moves=True, **kernel_settings):
    """The core's ``(init, kernel)`` of Gibbs tempering with 10 leapfrog steps."""
    algo, settings = hmc_settings(HMC, num_steps=10)
    core = {"num_warmup": NUM_WARMUP, "algo": algo, "replica_moves": replica_moves, **settings}
    return (
        lambda x, key: gibbs_init(x, potential_fn, BASE, key, **core),
        build_gibbs_kernel(potential_fn, BASE, **core, **kernel_settings),
    )


def scanned(chain, seed):
    """Every chain's states and infos over ``NUM_WARMUP + NUM_SAMPLES`` transitions, one fresh
    key per transition, vmapped over ``NUM_CHAINS`` chains started from the base."""
    init, kernel = chain

    def run(key):
        start_key, init_key, run_key = jax.random.split(key, 3)
        state = init(BASE.sample(start_key), init_key)

        def step(state, key):
            state, info = kernel(key, state)
            return state, (state, info)

        return jax.lax.scan(step, state, jax.random.split(run_key, NUM_WARMUP + NUM_SAMPLES))[1]

    keys = jax.random.split(jax.random.PRNGKey(seed), NUM_CHAINS)
    return jax.jit(jax.vmap(run))(keys)


@pytest.fixture(scope="module", params=["joint", "gibbs"])
def run(request):
    chain = joint_chain() if request.param == "joint" else gibbs_chain()
    return scanned(chain, seed=3)


def test_the_replica_draws_have_the_targets_moments(run):
    """The replica y is an exact posterior chain: its mean and second moments match the
    Gaussian's within 4 Monte Carlo standard errors."""
    states, _ = run
    draws = np.asarray(states.replica.position[:, NUM_WARMUP:], np.float64)
    for statistic, truth in (
        (draws[..., 0], MEAN[0]),
        (draws[..., 1], MEAN[1]),
        (draws[..., 0] ** 2, MEAN[0] ** 2 + COVARIANCE[0, 0]),
        (draws[..., 1] ** 2, MEAN[1] ** 2 + COVARIANCE[1, 1]),
        (draws[..., 0] * draws[..., 1], MEAN[0] * MEAN[1] + COVARIANCE[0, 1]),
    ):
        error = float(mcse(statistic))
        assert error < 0.1 * statistic.std()  # an effective sample size above 100
        assert abs(statistic.mean() - truth) < 4 * error


def test_the_tempered_chain_gives_log_z(run):
    """The tempered draws' Delta give log Z by paper eq. 20, within 4 standard errors, and the
    chains reach both ends of beta."""
    states, _ = run
    kept = slice(NUM_WARMUP, None)
    evidence = nx.tempering_log_normalizer(states.delta[:, kept], states.log_zeta[:, kept])
    assert evidence.stderr < 0.2
    assert abs(evidence.log_z - LOG_OFFSET) < 4 * evidence.stderr
    assert np.all(states.mixing.num_round_trips[:, -1] > 0)
    # log zeta moves during warm-up only.
    log_zeta = np.asarray(states.log_zeta)
    assert np.all(log_zeta[:, NUM_WARMUP:] == log_zeta[:, -1:])
    assert np.all(log_zeta[:, 0] != BASE.log_zeta)


def test_info_fields_have_one_value_per_transition(run):
    states, info = run
    assert isinstance(states, TemperingChainState) and isinstance(info, TemperingInfo)
    steps = (NUM_CHAINS, NUM_WARMUP + NUM_SAMPLES)
    for name in TemperingInfo._fields:
        assert getattr(info, name).shape == steps, name
    assert info.diverging.dtype == bool and info.replica_diverging.dtype == bool
    for name in ("swap_accept_prob", "base_accept_prob", "accept_prob", "replica_accept_prob"):
        values = np.asarray(getattr(info, name))
        assert np.all((values >= 0) & (values <= 1)), name
    assert np.all(np.asarray(info.num_steps) >= 1)
    # The replica's own move costs gradients too, counted apart.
    assert np.all(np.asarray(info.replica_num_steps) >= 1)
    assert np.all(states.iteration[:, -1] == NUM_WARMUP + NUM_SAMPLES)
    # The info's moves are the ones the state keeps.
    np.testing.assert_array_equal(info.accept_prob, states.inner_state.accept_prob)
    np.testing.assert_array_equal(info.replica_num_steps, states.replica_inner_state.num_steps)


@pytest.mark.parametrize("base_proposals", [True, False])
@pytest.mark.parametrize("family", ["joint", "gibbs"])
def test_a_transition_evaluates_phi_as_documented(family, base_proposals):
    """A transition evaluates ``phi`` and its gradient ``num_steps + replica_num_steps + 2``
    times (one fewer without base proposals), counted by a callback inside ``phi``."""
    evaluated = []

    def counted_potential_fn(x):
        jax.debug.callback(lambda points: evaluated.append(np.size(points) // 2), x)
        return potential_fn(x)

    joint = family == "joint"
    algo, settings = hmc_settings(NUTS, num_steps=None) if joint else hmc_settings(HMC, num_steps=7)
    core = {"num_warmup": 10, "algo": algo, **settings}
    init, build = (joint_init, build_joint_kernel) if joint else (gibbs_init, build_gibbs_kernel)
    kernel = jax.jit(build(counted_potential_fn, BASE, base_proposals=base_proposals, **core))
    state = init(jnp.zeros(2), counted_potential_fn, BASE, jax.random.PRNGKey(0), **core)
    beside_moves = 2 if base_proposals else 1
    for key in jax.random.split(jax.random.PRNGKey(1), 5):
        evaluated.clear()
        state, info = kernel(key, state)
        jax.effects_barrier()
        assert sum(evaluated) == int(info.num_steps + info.replica_num_steps) + beside_moves


def test_the_core_state_holds_flat_positions_only():
    init, _ = gibbs_chain(replica_moves=False, base_proposals=False)
    state = jax.jit(init)(jnp.zeros(2), jax.random.PRNGKey(0))
    assert set(TemperingChainState._fields).isdisjoint({"z", "rng_key", "build"})
    assert state.tempered.position.shape == (2,) and state.replica_inner_state is None
    assert float(state.beta) == 0.0 and float(state.delta) == float(
        potential_fn(np.zeros(2)) + BASE.log_zeta - BASE.potential(jnp.zeros(2))
    )


def test_without_replica_moves_the_info_reports_no_replica_move():
    """Without the replica's own move its info fields are zero, and the kernel is a pure
    function of its key and state."""
    init, kernel = gibbs_chain(replica_moves=False)
    kernel = jax.jit(kernel)
    state = jax.jit(init)(jnp.zeros(2), jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(1)
    new_state, info = kernel(key, state)
    again, _ = kernel(key, state)
    assert float(info.replica_accept_prob) == 0.0 and not bool(info.replica_diverging)
    assert int(info.replica_num_steps) == 0
    for first, second in zip(jax.tree.leaves(new_state), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(first, second)


@pytest.mark.parametrize("family", ["joint", "gibbs"])
def test_the_numpyro_state_wraps_the_core_state(family):
    """The shell's TemperingState carries the core state, the unravelled draws and the chain's
    key, which it carries on as the one the core's transition leaves unused."""
    if family == "joint":
        (core_init, kernel), num_keys = joint_chain(inner_kernel=HMC), JOINT_KEYS
    else:
        (core_init, kernel), num_keys = gibbs_chain(), GIBBS_KEYS

    def init_fn(position, rng_key, num_warmup):
        return core_init(position, rng_key)

    init, step = tempering_chain(init_fn, kernel, lambda x: {"x": x}, num_keys)

    @jax.jit
    def start_and_move(key):
        state = init(jnp.zeros(2), key, NUM_WARMUP)
        return state, step(state, NUM_WARMUP), kernel(state.rng_key, state.core)

    state, moved, (core, info) = start_and_move(jax.random.PRNGKey(4))
    assert isinstance(state, nx.TemperingState) and isinstance(moved, nx.TemperingState)
    assert float(state.swap_accept_prob) == 1.0 and float(state.base_accept_prob) == 0.0
    for first, second in zip(jax.tree.leaves(moved.core), jax.tree.leaves(core), strict=True):
        np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(moved.z["x"], core.replica.position)
    np.testing.assert_array_equal(moved.tempered_z["x"], core.tempered.position)
    np.testing.assert_array_equal(moved.delta, core.delta)
    np.testing.assert_array_equal(moved.swap_accept_prob, info.swap_accept_prob)
    np.testing.assert_array_equal(moved.rng_key, jax.random.split(state.rng_key, num_keys)[0])
