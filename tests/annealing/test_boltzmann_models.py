"""The NumPyro models of Boltzmann machines: their normalisers are the machines' partition
functions, and enumerating the hidden site gives the marginal energy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from boltzmann_checks import (
    all_states,
)
from jax.scipy.special import logsumexp
from numpyro.infer.util import log_density

import numpyro_extras as nx


@pytest.mark.parametrize("units", ["spin", "binary"])
def test_rbm_model_normaliser_is_the_machine_partition_function(units):
    base = nx.random_rbm(jax.random.PRNGKey(2), 3, 4, inverse_temperature=2.0)
    machine = nx.rbm(base.weights, base.visible_bias, base.hidden_bias + 0.3, units=units)
    bits = all_states(7, "binary")

    def model_log_density(state):
        values = {"v": state[:3], "h": state[3:]}
        return log_density(nx.rbm_model, (machine,), {}, values)[0]

    log_densities = jax.vmap(model_log_density)(bits)
    np.testing.assert_allclose(logsumexp(log_densities), machine.log_partition(), atol=1e-10)


def test_ising_model_normaliser_is_the_lattice_partition_function():
    bits = all_states(16, "binary")

    def model_log_density(state):
        values = {"white": state[:8], "black": state[8:]}
        return log_density(nx.ising_model, (4,), {"temperature": 2.5}, values)[0]

    log_densities = jax.jit(jax.vmap(model_log_density))(bits)
    exact = nx.ising_lattice(4, temperature=2.5).log_partition()
    np.testing.assert_allclose(logsumexp(log_densities), exact, atol=1e-10)


def test_funsor_enumeration_of_the_hidden_site_gives_the_marginal_energy():
    pytest.importorskip("funsor")
    from numpyro import handlers
    from numpyro.contrib.funsor import config_enumerate, enum
    from numpyro.contrib.funsor import log_density as enumerated_log_density

    machine = nx.random_rbm(jax.random.PRNGKey(3), 3, 4, inverse_temperature=2.0)
    for beta in (0.3, 1.0):
        tempered = handlers.scale(config_enumerate(nx.rbm_model), scale=jnp.asarray(beta))
        for bits in (jnp.array([0.0, 1.0, 1.0]), jnp.array([1.0, 0.0, 0.0])):
            value, _ = enumerated_log_density(enum(tempered, -2), (machine,), {}, {"v": bits})
            # The Bernoulli(1/2) base measure and the n ln 2 factor cancel, also when scaled.
            v = 2.0 * bits - 1.0
            np.testing.assert_allclose(value, machine.visible_log_density(v, beta), atol=1e-10)
