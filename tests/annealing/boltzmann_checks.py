"""Exact quantities shared by the Boltzmann machine and mAIS tests: every state of a few units,
brute-force log Z, and batches of random RBMs."""

import itertools
import math

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

import numpyro_extras as nx

LOG2 = math.log(2.0)


def all_states(num_units, units="spin"):
    """Every state of ``num_units`` units, shape ``(2^num_units, num_units)``; the row index's
    bit ``i`` (most significant first) is unit ``i``."""
    low = -1.0 if units == "spin" else 0.0
    return jnp.asarray(list(itertools.product([low, 1.0], repeat=num_units)))


def brute_force_log_partition(machine, beta=1.0):
    """``log sum_{v,h} exp(-beta E(v, h))`` over all ``2^n`` joint states."""
    v = all_states(machine.num_visible, machine.units)
    h = all_states(machine.num_hidden, machine.units)
    return logsumexp(machine.log_density(v[:, None, :], h[None, :, :], beta))


def exact_free_energies(machines):
    return -jax.vmap(lambda machine: machine.log_partition())(machines)


def random_machines(seed, count, num_visible, num_hidden, inverse_temperature):
    """``count`` random RBMs of the mAIS paper's Sec. IV, stacked along a leading axis."""
    keys = jax.random.split(jax.random.PRNGKey(seed), count)
    return jax.vmap(lambda key: nx.random_rbm(key, num_visible, num_hidden, inverse_temperature))(
        keys
    )
