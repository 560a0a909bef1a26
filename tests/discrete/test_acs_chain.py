"""One ACS chain from its pure functions (``acs_chain``), without NumPyro's MCMC: the tuner at
init, then a compiled scan of steps, against the exact marginals of a small binary target."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np

import numpyro_extras as nx
from numpyro_extras.discrete import DiscreteVariable, TuningSettings
from numpyro_extras.discrete.chain import acs_chain
from numpyro_extras.discrete.target import potential_target
from numpyro_extras.shell.compiled_chain import BuildTag


def test_a_chain_of_the_pure_functions_samples_the_exact_marginals():
    machine = nx.random_rbm(jax.random.PRNGKey(3), 6, 3, inverse_temperature=2.0, units="binary")
    variables = {"v": DiscreteVariable((6,), 2, "binary")}
    target = potential_target(
        lambda values: -machine.visible_log_density(values["v"]), variables, "auto"
    )
    init_one, step_one, _ = acs_chain(
        target,
        TuningSettings(),
        schedule=None,
        num_copies=8,
        num_sweeps=0,
        inner=None,
        discrete_steps=1,
        num_warmup=0,
        tag=BuildTag("test"),
        model_sites=False,
    )
    num_chains, num_steps = 8, 3000
    states = jax.vmap(lambda key: init_one(key, None, None, {}))(
        jax.random.split(jax.random.PRNGKey(0), num_chains)
    )
    assert np.all(np.isfinite(np.asarray(states.tuning.schedule.step_sizes)))

    def step(states, _):
        states = jax.vmap(lambda state: step_one(state, (), {}))(states)
        return states, states.z["v"]

    _, draws = jax.lax.scan(jax.jit(step), states, None, length=num_steps)
    draws = np.asarray(draws, dtype=float)  # (steps, chains, 6)

    # Exact marginals by enumerating the 64 visible states.
    states_all = jnp.asarray(list(itertools.product([0, 1], repeat=6)))
    log_p = np.asarray(jax.vmap(machine.visible_log_density)(states_all))
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    exact = p @ np.asarray(states_all, dtype=float)

    # Monte Carlo error from the spread of the chains' means (chains independent).
    chain_means = draws.mean(axis=0)
    estimate = chain_means.mean(axis=0)
    stderr = chain_means.std(axis=0, ddof=1) / np.sqrt(num_chains)
    assert np.all(stderr < 0.01)
    np.testing.assert_array_less(np.abs(estimate - exact), 4 * stderr + 1e-3)
