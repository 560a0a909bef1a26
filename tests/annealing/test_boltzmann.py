"""Bipartite Boltzmann machines: exact log Z and the marginal energy (mAIS paper eqs. 39, 43),
against brute-force enumeration."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from boltzmann_checks import (
    LOG2,
    all_states,
    brute_force_log_partition,
)
from jax.scipy.special import logsumexp

import numpyro_extras as nx

# ------------------------------------------------------------------------------------------------
# Exact quantities
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("units", ["spin", "binary"])
def test_marginal_energy_is_the_log_sum_over_the_other_layer(units):
    # Claim 1: E_V of eq. 39 equals -logsumexp over all 2^|H| values of -E_k(v, h).
    base = nx.random_rbm(jax.random.PRNGKey(0), 4, 6, inverse_temperature=2.0)
    machine = nx.rbm(
        3.0 * base.weights,
        base.visible_bias + 0.5,
        base.hidden_bias - 0.7,
        temperature=0.8,
        units=units,
    )
    v = all_states(4, units)
    h = all_states(6, units)
    for beta in (0.0, 0.3, 1.0, 2.5):
        joint = machine.log_density(v[:, None, :], h[None, :, :], beta)
        np.testing.assert_allclose(
            machine.visible_log_density(v, beta), logsumexp(joint, axis=1), rtol=0, atol=1e-10
        )
        np.testing.assert_allclose(
            machine.hidden_log_density(h, beta), logsumexp(joint, axis=0), rtol=0, atol=1e-10
        )
    # -E_V(v, 0) = |H| ln 2 and ln Z_0 = n ln 2 (both spin conventions: two states per unit).
    np.testing.assert_allclose(machine.visible_log_density(v, 0.0), 6 * LOG2, atol=1e-12)
    np.testing.assert_allclose(machine.base_log_partition(), 10 * LOG2, atol=1e-12)


def test_stable_at_huge_fields():
    machine = nx.rbm(1e4 * jnp.ones((2, 3)), temperature=1.0)
    value = machine.visible_log_density(jnp.ones(2), 1.0)
    # ln 2cosh(2e4) = 2e4 to double precision; log(2 cosh) would overflow to inf.
    np.testing.assert_allclose(value, 3 * 2e4, rtol=1e-12)


@pytest.mark.parametrize("units", ["spin", "binary"])
def test_exact_log_partition_matches_brute_force(units):
    base = nx.random_rbm(jax.random.PRNGKey(1), 5, 7, inverse_temperature=3.0, units=units)
    machine = nx.rbm(
        base.weights, base.visible_bias + 0.2, base.hidden_bias, temperature=0.4, units=units
    )
    for beta in (0.0, 0.5, 1.0):
        expected = brute_force_log_partition(machine, beta)
        # A chunk size that does not divide 2^5 exercises the padded last chunk.
        np.testing.assert_allclose(machine.log_partition(beta, chunk_size=7), expected, atol=1e-10)
        np.testing.assert_allclose(machine.swap_layers().log_partition(beta), expected, atol=1e-10)
    np.testing.assert_allclose(machine.free_energy(), -brute_force_log_partition(machine))
    # beta = 0: every one of the 2^12 states has weight 1.
    np.testing.assert_allclose(machine.log_partition(0.0), 12 * LOG2, atol=1e-12)


def lattice_energy(spins, couplings, fields, temperature):
    """The Ising energy on an (L, L) grid, written independently of the checkerboard split."""
    right = couplings[0] * spins * jnp.roll(spins, -1, axis=1)
    down = couplings[1] * spins * jnp.roll(spins, -1, axis=0)
    return -(right.sum() + down.sum() + (fields * spins).sum()) / temperature


@pytest.mark.parametrize("disorder", [False, True])
def test_ising_lattice_log_partition_matches_brute_force(disorder):
    # A 4 x 4 periodic lattice: 2^16 spin configurations, against 2^8 enumerated by the split.
    size, temperature = 4, 2.0
    rng = np.random.default_rng(0)
    couplings = rng.choice([-1.0, 1.0], (2, size, size)) if disorder else np.ones((2, size, size))
    fields = 0.3 * rng.standard_normal((size, size)) if disorder else np.zeros((size, size))
    lattice = nx.ising_lattice(size, couplings, fields, temperature=temperature)
    assert lattice.num_visible == lattice.num_hidden == 8
    spins = all_states(16).reshape(-1, size, size)
    energies = jax.vmap(lambda s: lattice_energy(s, couplings, fields, temperature))(spins)
    np.testing.assert_allclose(lattice.log_partition(), logsumexp(-energies), atol=1e-10)
    # The machine's own energy agrees configuration by configuration.
    white, black = nx.checkerboard_sites(size)
    flat = spins.reshape(-1, size * size)
    np.testing.assert_allclose(
        lattice.energy(flat[:, white], flat[:, black]), energies, rtol=0, atol=1e-10
    )


def test_ising_lattice_high_temperature_and_two_by_two():
    # At T -> infinity ln Z -> n ln 2; a 2 x 2 periodic lattice double-counts each bond.
    np.testing.assert_allclose(
        nx.ising_lattice(6, temperature=1e8).log_partition(), 36 * LOG2, atol=1e-6
    )
    lattice = nx.ising_lattice(2)
    np.testing.assert_allclose(lattice.weights, 2.0 * np.ones((2, 2)))
