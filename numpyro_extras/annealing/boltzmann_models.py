"""Boltzmann machines as NumPyro models with discrete latent sites.

:func:`rbm_model` and :func:`ising_model` put the energies of
:mod:`numpyro_extras.annealing.boltzmann` into ``numpyro.factor`` sites, so that generic AIS on
NumPyro models (and any discrete sampler) can be checked against the exact
:meth:`~numpyro_extras.annealing.boltzmann.BipartiteBoltzmann.log_partition`.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from numpyro_extras.annealing.boltzmann import ising_lattice, low_state

__all__ = ["ising_model", "rbm_model"]


def _bipartite_model(machine, visible_name, hidden_name):
    """Both layers as Bernoulli(1/2) sites in plates, with the energy as per-unit factors."""
    low = low_state(machine.units)
    with numpyro.plate(f"{visible_name}_units", machine.num_visible):
        visible_on = jnp.asarray(numpyro.sample(visible_name, dist.Bernoulli(probs=0.5)))
        v = low + (1.0 - low) * visible_on
        numpyro.factor(f"{visible_name}_bias", v * machine.visible_bias / machine.temperature)
    with numpyro.plate(f"{hidden_name}_units", machine.num_hidden):
        hidden_on = jnp.asarray(numpyro.sample(hidden_name, dist.Bernoulli(probs=0.5)))
        h = low + (1.0 - low) * hidden_on
        # Written per hidden unit, h_j (c_j + sum_i w_ij v_i) / T, so that enumerating the hidden
        # site (shape (2, 1) under parallel enumeration) broadcasts against the hidden plate and
        # funsor sums each hidden unit out separately (eq. 39).
        numpyro.factor(
            f"{hidden_name}_coupling",
            h * (machine.hidden_bias + v @ machine.weights) / machine.temperature,
        )
    # Cancels the Bernoulli(1/2) base measure, 2^-n, so the model's normaliser is exactly Z.
    numpyro.factor("base_measure", machine.num_units * math.log(2.0))


def rbm_model(machine):
    """The Boltzmann machine as a NumPyro model with discrete latent sites.

    Sites: ``"v"`` (``|V|`` Bernoulli(1/2) draws in plate ``"v_units"``) and ``"h"`` (``|H|``
    draws in plate ``"h_units"``), each in ``{0, 1}`` and mapped to the machine's unit states
    (``2 x - 1`` for spins); factor sites ``"v_bias"`` (per visible unit, ``b_i v_i / T``),
    ``"h_coupling"`` (per hidden unit, ``h_j (c_j + sum_i w_ij v_i) / T``) and
    ``"base_measure"`` (the constant ``n ln 2``).

    **Normaliser:** the model's unnormalised density over the ``2^n`` joint states is
    ``prod Bernoulli(1/2) * exp(-E(v, h) + n ln 2) = exp(-E(v, h))``, so its log normaliser is
    exactly ``machine.log_partition()``, ``log Z = -F`` of eq. 43. Tempering its factor sites
    by ``beta`` from the prior (or the whole model by ``beta``) gives the paper's path.

    The hidden site can be enumerated (summed out by funsor; marginalized AIS, mAIS-V). To sum
    out the visible layer instead, pass ``machine.swap_layers()``: the sites keep their names
    but exchange roles.

    :param BipartiteBoltzmann machine: e.g. from :func:`random_rbm`.

    **Example:**

    .. code-block:: python

        machine = nx.random_rbm(jax.random.PRNGKey(0), 5, 5)
        evidence = nx.ais(rng_key, nx.rbm_model, (machine,), num_particles=1000,
                          num_temperatures=50)
        evidence.log_z, machine.log_partition()
    """
    _bipartite_model(machine, "v", "h")


def ising_model(size, coupling=1.0, field=0.0, temperature=1.0):
    """The periodic ``L x L`` Ising model of :func:`ising_lattice` as a NumPyro model.

    Sites: ``"white"`` (``L^2 / 2`` Bernoulli(1/2) draws in plate ``"white_units"``, the white
    sites of :func:`checkerboard_sites` in row-major order) and ``"black"`` (plate
    ``"black_units"``), each in ``{0, 1}`` and mapped to spins ``2 x - 1``; factor sites
    ``"white_bias"``, ``"black_coupling"`` (per black site, its field plus its four bonds) and
    ``"base_measure"`` (``L^2 ln 2``).

    **Normaliser:** exactly ``ising_lattice(size, coupling, field,
    temperature=temperature).log_partition()``, i.e. ``log sum_s exp(-E(s))`` over the ``2^(L^2)``
    spin configurations (the Bernoulli base measure is cancelled by ``"base_measure"``). The
    ``"black"`` site can be enumerated (summed out analytically given the white sites).

    :param int size: ``L``, even.
    :param coupling: ``J``, scalar or ``(2, L, L)`` (see :func:`ising_lattice`).
    :param field: ``h``, scalar or ``(L, L)``.
    :param float temperature: ``T``.

    **Example:**

    .. code-block:: python

        evidence = nx.ais(rng_key, nx.ising_model, (4,), {"temperature": 2.5},
                          num_particles=1000, num_temperatures=100)
        exact = nx.ising_lattice(4, temperature=2.5).log_partition()
    """
    machine = ising_lattice(size, coupling, field, temperature=temperature)
    _bipartite_model(machine, "white", "black")
