"""Boltzmann machines for physicists: RBMs and checkerboard Ising models, exact log Z, and
marginalized AIS against AIS with the mAIS paper's block-Gibbs kernels.

One code path serves every model here: a bipartite Boltzmann machine with visible units ``v``,
hidden units ``h`` and the energy of the mAIS paper's eq. 43,

    E(v, h) = -(1 / T) (b . v + c . h + v^T W h),

with units in ``{-1, +1}`` (``units="spin"``, the paper's) or ``{0, 1}`` (``units="binary"``). A
periodic ``L x L`` Ising lattice split as a checkerboard is the same object with a sparse ``W``
(white sites are the visible layer, black sites the hidden one; mAIS paper Fig. 2).

The annealing path is the mAIS paper's (Sec. III C): ``E_k = beta_k E`` from the uniform
distribution ``P_0`` (``beta_0 = 0``) to the model (``beta_K = 1``). Summing one layer out
analytically gives the marginal energy of eq. 39; marginalized AIS (mAIS) runs AIS on that
marginal with the collapsed block-Gibbs kernel of eq. 41, and joint AIS uses the kernel of eq. 42,
which satisfies condition (36), so the paper's Theorems 1-2 (mAIS has the smaller variance of
``Z``-hat and the smaller free-energy bias) apply to the pair.

The NumPyro models :func:`rbm_model` and :func:`ising_model` put the same energies into
``numpyro.factor`` sites, so generic AIS on NumPyro models can be checked against the exact
:meth:`BipartiteBoltzmann.log_partition`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import logsumexp

from numpyro_extras.annealing.driver import (
    anneal,
    evidence_from_log_weights,
    inverse_temperature_schedule,
)
from numpyro_extras.evidence import Evidence

__all__ = [
    "BipartiteBoltzmann",
    "BoltzmannComparison",
    "PairedLogWeights",
    "ais_boltzmann",
    "ais_log_weights",
    "checkerboard_sites",
    "collapsed_gibbs_transition",
    "ising_lattice",
    "ising_model",
    "joint_log_weight_increment",
    "joint_transition",
    "mais_log_weights",
    "mais_vs_ais",
    "marginal_log_weight_increment",
    "marginalized_ais_boltzmann",
    "paired_log_weights",
    "random_rbm",
    "rbm",
    "rbm_model",
    "resolve_side",
]

UNITS = ("spin", "binary")
SIDES = ("V", "H", "auto")
AIS_KERNELS = ("paired", "gibbs")
# Enumerating more than 2^MAX_ENUMERATED_UNITS states of the smaller layer takes minutes to hours.
MAX_ENUMERATED_UNITS = 30


def _low_state(units):
    """The value of an "off" unit: -1 for spins, 0 for binary units."""
    return -1.0 if units == "spin" else 0.0


def _log_two_cosh(x):
    # ln 2cosh(x) = |x| + log1p(exp(-2|x|)) never overflows, unlike log(2 * cosh(x)).
    magnitude = jnp.abs(x)
    return magnitude + jnp.log1p(jnp.exp(-2.0 * magnitude))


def _log_unit_sum(x, units):
    """``log sum_{s in states} exp(s x)`` for one unit: ln 2cosh(x) for spins, softplus for
    binary units (the per-unit terms of eq. 39)."""
    return _log_two_cosh(x) if units == "spin" else jax.nn.softplus(x)


@dataclasses.dataclass(frozen=True)
class BipartiteBoltzmann:
    """A bipartite Boltzmann machine (an RBM, or a checkerboard-split Ising lattice).

    Energy (mAIS paper eq. 43): ``E(v, h) = -(1 / T) (b . v + c . h + v^T W h)`` with every unit
    in ``{-1, +1}`` (``units="spin"``) or ``{0, 1}`` (``units="binary"``). The annealing path is
    ``E_k = beta E``; ``beta = 0`` is the uniform distribution over all ``2^(|V| + |H|)``
    states. Every method takes states with any leading batch shape (``v`` of shape
    ``(..., |V|)``) and an inverse temperature ``beta`` (default 1, the model itself).

    It is a JAX pytree (``units`` is static), so it can be passed through ``jit`` and ``vmap``.
    Build one with :func:`rbm` (checks shapes), :func:`random_rbm` or :func:`ising_lattice`.

    :param weights: couplings ``W``, shape ``(|V|, |H|)``.
    :param visible_bias: ``b``, shape ``(|V|,)``.
    :param hidden_bias: ``c``, shape ``(|H|,)``.
    :param temperature: the model temperature ``T`` (the couplings at ``beta`` are scaled by
        ``beta / T``).
    :param str units: ``"spin"`` or ``"binary"``.

    **Example:**

    .. code-block:: python

        machine = nx.random_rbm(jax.random.PRNGKey(0), 10, 20, inverse_temperature=2.0)
        machine.log_partition()                    # exact log Z by enumerating 2^10 states
        machine.visible_log_density(v, beta=0.5)   # -E_V(v, beta), eq. 39
    """

    weights: jax.Array
    visible_bias: jax.Array
    hidden_bias: jax.Array
    temperature: jax.Array
    units: str = "spin"

    @property
    def num_visible(self) -> int:
        """``|V|``."""
        return int(jnp.shape(self.weights)[0])

    @property
    def num_hidden(self) -> int:
        """``|H|``."""
        return int(jnp.shape(self.weights)[1])

    @property
    def num_units(self) -> int:
        """``n = |V| + |H|``, the number of spins (the paper's free energy per spin is
        ``F / n``)."""
        return self.num_visible + self.num_hidden

    def swap_layers(self) -> BipartiteBoltzmann:
        """The same machine with the visible and hidden layers exchanged (``W -> W^T``), so that
        everything written for the visible layer (e.g. mAIS-V) applies to the hidden one."""
        return BipartiteBoltzmann(
            jnp.swapaxes(self.weights, 0, 1),
            self.hidden_bias,
            self.visible_bias,
            self.temperature,
            self.units,
        )

    def energy(self, v, h):
        """``E(v, h)`` of eq. 43 at the model itself (``beta = 1``).

        :param v: visible states, shape ``(..., |V|)``.
        :param h: hidden states, shape ``(..., |H|)``.
        :return: array of shape ``(...)``.
        """
        couplings = jnp.einsum("...i,ij,...j->...", v, self.weights, h)
        return -(v @ self.visible_bias + h @ self.hidden_bias + couplings) / self.temperature

    def log_density(self, v, h, beta=1.0):
        """The unnormalised joint log density ``-beta E(v, h)`` of the tempered model ``P_beta``.

        :param v: visible states, shape ``(..., |V|)``.
        :param h: hidden states, shape ``(..., |H|)``.
        :param beta: inverse temperature of the annealing path.
        :return: array of shape ``(...)``.
        """
        return -beta * self.energy(v, h)

    def hidden_fields(self, v, beta=1.0):
        """The field on each hidden unit, ``(beta / T) (c + W^T v)``, shape ``(..., |H|)``."""
        return (beta / self.temperature) * (self.hidden_bias + v @ self.weights)

    def visible_fields(self, h, beta=1.0):
        """The field on each visible unit, ``(beta / T) (b + W h)``, shape ``(..., |V|)``."""
        return (beta / self.temperature) * (self.visible_bias + h @ self.weights.T)

    def visible_log_density(self, v, beta=1.0):
        """``-E_V(v, beta) = log sum_h exp(-beta E(v, h))``, the marginal of the tempered joint
        (eq. 39; for spins ``a b . v + sum_j ln 2cosh(a (c_j + sum_i w_ij v_i))``, ``a = beta/T``).

        It is the marginal of the tempered joint, not the tempered marginal, and its sum over
        ``v`` is ``Z_beta``, the joint's normaliser.

        :param v: visible states, shape ``(..., |V|)``.
        :param beta: inverse temperature of the annealing path.
        :return: array of shape ``(...)``.

        **Example:**

        .. code-block:: python

            machine.visible_log_density(v, beta=0.0)  # |H| ln 2 for spins, whatever v
        """
        hidden_sums = _log_unit_sum(self.hidden_fields(v, beta), self.units)
        return (beta / self.temperature) * (v @ self.visible_bias) + jnp.sum(hidden_sums, -1)

    def hidden_log_density(self, h, beta=1.0):
        """``-E_H(h, beta) = log sum_v exp(-beta E(v, h))`` (eq. 32-33, mAIS-H), shape ``(...)``."""
        return self.swap_layers().visible_log_density(h, beta)

    def _sample_units(self, rng_key, fields):
        """Independent units with ``P(s) ∝ exp(s * field)`` over the two unit states."""
        low = _low_state(self.units)
        # P(s = 1) = sigmoid((1 - low) field): sigmoid(2 field) for spins, sigmoid(field) binary.
        on = jax.random.bernoulli(rng_key, jax.nn.sigmoid((1.0 - low) * fields))
        return jnp.where(on, 1.0, low).astype(jnp.result_type(fields))

    def sample_hidden(self, rng_key, v, beta=1.0):
        """An exact draw ``h ~ P_beta(h | v)`` (eq. 40; ``P(h_j = 1 | v) = sigmoid(2 a u_j)`` for
        spins), shape ``(..., |H|)``."""
        return self._sample_units(rng_key, self.hidden_fields(v, beta))

    def sample_visible(self, rng_key, h, beta=1.0):
        """An exact draw ``v ~ P_beta(v | h)`` (eq. 40), shape ``(..., |V|)``."""
        return self._sample_units(rng_key, self.visible_fields(h, beta))

    def sample_uniform(self, rng_key, shape):
        """Uniform unit states of the given shape: exact draws from ``P_0``."""
        low = _low_state(self.units)
        on = jax.random.bernoulli(rng_key, 0.5, shape)
        return jnp.where(on, 1.0, low).astype(jnp.result_type(float))

    def base_log_partition(self):
        """``log Z_0`` of the uniform start ``P_0`` (``n ln 2``).

        It is derived from the same unnormalised marginal density the annealing uses, at
        ``beta = 0``: ``|V| ln 2 + (-E_V(v, 0))`` for any ``v``, so
        the hidden layer's ``|H| ln 2`` can never be dropped on one side only.
        """
        v = jnp.full((self.num_visible,), _low_state(self.units))
        return self.num_visible * math.log(2.0) + self.visible_log_density(v, 0.0)

    def log_partition(self, beta=1.0, *, chunk_size=2**14):
        """Exact ``log Z_beta = log sum_{v,h} exp(-beta E(v, h))`` by enumeration.

        The smaller layer is enumerated (``2^min(|V|, |H|)`` states, in chunks of
        ``chunk_size``) and the other summed analytically (eq. 39). ``min(|V|, |H|) = 20`` takes
        about a second on a CPU.

        :param beta: inverse temperature of the annealing path.
        :param int chunk_size: states per chunk (memory is ``O(chunk_size * n)``).
        :return: scalar array ``log Z_beta``.
        :raises ValueError: if the smaller layer has more than 30 units.

        **Example:**

        .. code-block:: python

            nx.ising_lattice(4, temperature=2.0).log_partition()  # 16 spins, 2^8 states
        """
        machine = self if self.num_visible <= self.num_hidden else self.swap_layers()
        num_enumerated = machine.num_visible
        if num_enumerated > MAX_ENUMERATED_UNITS:
            raise ValueError(
                f"Exact log Z enumerates 2^{num_enumerated} states of the smaller layer; "
                f"at most {MAX_ENUMERATED_UNITS} units are supported."
            )
        return _enumerated_log_partition(machine, beta, min(chunk_size, 2**num_enumerated))

    def free_energy(self, beta=1.0, **kwargs):
        """Exact free energy ``F = -log Z`` (mAIS paper eq. 2); see :meth:`log_partition`."""
        return -self.log_partition(beta, **kwargs)


jax.tree_util.register_dataclass(
    BipartiteBoltzmann,
    data_fields=["weights", "visible_bias", "hidden_bias", "temperature"],
    meta_fields=["units"],
)


def _enumerated_states(indices, num_units, low):
    """Unit states whose bit ``i`` of ``indices`` gives unit ``i`` (0 -> ``low``, 1 -> 1)."""
    bits = (indices[:, None] >> jnp.arange(num_units)) & 1
    return jnp.where(bits == 1, 1.0, low).astype(jnp.result_type(float))


@functools.partial(jax.jit, static_argnums=2)
def _enumerated_log_partition(machine, beta, chunk_size):
    num_states = 2**machine.num_visible
    num_chunks = -(-num_states // chunk_size)
    low = _low_state(machine.units)

    def chunk_log_sum(chunk_index):
        indices = chunk_index * chunk_size + jnp.arange(chunk_size)
        states = _enumerated_states(indices, machine.num_visible, low)
        log_values = machine.visible_log_density(states, beta)
        # Indices past 2^|V| (the padding of the last chunk) do not exist.
        return logsumexp(jnp.where(indices < num_states, log_values, -jnp.inf))

    return logsumexp(jax.lax.map(chunk_log_sum, jnp.arange(num_chunks)))


def _is_concrete(array):
    # Model arguments may be traced (e.g. under jit); their values are checked when concrete.
    return not isinstance(array, jax.core.Tracer)


def _as_float_array(value, name):
    array = jnp.asarray(value, dtype=jnp.result_type(float))
    if _is_concrete(array) and not bool(jnp.all(jnp.isfinite(array))):
        raise ValueError(f"{name} contains non-finite values.")
    return array


def rbm(weights, visible_bias=None, hidden_bias=None, *, temperature=1.0, units="spin"):
    """Build a :class:`BipartiteBoltzmann` machine, checking shapes and values.

    :param weights: couplings ``W``, shape ``(|V|, |H|)``.
    :param visible_bias: ``b``, shape ``(|V|,)`` (default zeros).
    :param hidden_bias: ``c``, shape ``(|H|,)`` (default zeros).
    :param float temperature: the model temperature ``T > 0`` of eq. 43.
    :param str units: ``"spin"`` (``{-1, +1}``, the paper's) or ``"binary"`` (``{0, 1}``).
    :return: :class:`BipartiteBoltzmann`.
    :raises ValueError: for inconsistent shapes, non-finite values, ``T <= 0`` or unknown
        ``units``.

    **Example:**

    .. code-block:: python

        machine = nx.rbm(np.ones((3, 2)), units="binary", temperature=0.5)
    """
    if units not in UNITS:
        raise ValueError(f"units must be one of {UNITS}, got {units!r}.")
    weights = _as_float_array(weights, "weights")
    if weights.ndim != 2 or 0 in weights.shape:
        raise ValueError(f"weights must have shape (|V|, |H|) with both >= 1, got {weights.shape}.")
    num_visible, num_hidden = weights.shape
    biases = []
    for name, bias, size in (
        ("visible_bias", visible_bias, num_visible),
        ("hidden_bias", hidden_bias, num_hidden),
    ):
        bias = jnp.zeros(size) if bias is None else _as_float_array(bias, name)
        if bias.shape != (size,):
            raise ValueError(f"{name} must have shape ({size},), got {bias.shape}.")
        biases.append(bias)
    temperature = _as_float_array(temperature, "temperature")
    if temperature.shape != () or (_is_concrete(temperature) and not float(temperature) > 0):
        raise ValueError(f"temperature must be a positive scalar, got {temperature}.")
    return BipartiteBoltzmann(weights, biases[0], biases[1], temperature, units)


def random_rbm(rng_key, num_visible, num_hidden, inverse_temperature=1.0, *, units="spin"):
    """A random RBM of the mAIS paper's experiments (Sec. IV).

    ``b_i, c_j ~ U[-0.001, 0.001]``, ``w_ij ~ N(0, 1 / n)`` with ``n = |V| + |H|``, model
    temperature ``T = 1 / inverse_temperature``.

    :param rng_key: PRNG key.
    :param int num_visible: ``|V|``.
    :param int num_hidden: ``|H|``.
    :param float inverse_temperature: ``1 / T`` (the paper's x-axis, 0.2 to 8).
    :param str units: ``"spin"`` (the paper's) or ``"binary"``.
    :return: :class:`BipartiteBoltzmann`.

    **Example:**

    .. code-block:: python

        machine = nx.random_rbm(jax.random.PRNGKey(0), 20, 40, inverse_temperature=8.0)
        machine.free_energy() / machine.num_units   # about -3.8 (Table I)
    """
    if int(num_visible) < 1 or int(num_hidden) < 1:
        raise ValueError(f"Both layers need units, got |V|={num_visible}, |H|={num_hidden}.")
    if not float(inverse_temperature) > 0:
        raise ValueError(f"inverse_temperature must be positive, got {inverse_temperature}.")
    num_units = int(num_visible) + int(num_hidden)
    weight_key, visible_key, hidden_key = jax.random.split(rng_key, 3)
    weights = jax.random.normal(weight_key, (num_visible, num_hidden)) / math.sqrt(num_units)
    visible_bias = jax.random.uniform(visible_key, (num_visible,), minval=-1e-3, maxval=1e-3)
    hidden_bias = jax.random.uniform(hidden_key, (num_hidden,), minval=-1e-3, maxval=1e-3)
    return rbm(
        weights,
        visible_bias,
        hidden_bias,
        temperature=1.0 / float(inverse_temperature),
        units=units,
    )


def checkerboard_sites(size):
    """The checkerboard split of an ``L x L`` lattice (mAIS paper Fig. 2).

    :param int size: ``L``, even.
    :return: ``(white, black)``: NumPy arrays of row-major site indices ``i * L + j`` with
        ``i + j`` even (white, the visible layer) and odd (black, the hidden layer).
    """
    rows, columns = np.divmod(np.arange(size * size), size)
    white = (rows + columns) % 2 == 0
    return np.flatnonzero(white), np.flatnonzero(~white)


def ising_lattice(size, coupling=1.0, field=0.0, *, temperature=1.0):
    """A periodic ``L x L`` Ising model as a bipartite machine (checkerboard split).

    Energy ``E(s) = -(1 / T) (sum_<ij> J_ij s_i s_j + sum_i h_i s_i)`` over nearest-neighbour
    bonds with periodic boundaries and ``s_i in {-1, +1}``. White sites (``i + j`` even) form the
    visible layer and black sites the hidden one (see :func:`checkerboard_sites`); every bond
    joins a white and a black site, so ``W`` has four nonzero entries per row. For ``L = 2``
    the two bonds joining each neighbouring pair (left and right, through the boundary) add up.

    :param int size: ``L``, even and at least 2.
    :param coupling: ``J``: a scalar (ferromagnet for ``J > 0``) or an array ``(2, L, L)`` whose
        ``[0, i, j]`` is the bond from ``(i, j)`` to ``(i, j + 1)`` and ``[1, i, j]`` the bond to
        ``(i + 1, j)`` (e.g. random ``+-J`` spin glasses).
    :param field: the external field ``h``: a scalar or an array ``(L, L)``.
    :param float temperature: ``T``; the critical point of the ferromagnet is
        ``1 / T = ln(1 + sqrt(2)) / 2 ≈ 0.4407``.
    :return: :class:`BipartiteBoltzmann` with ``units="spin"`` and ``|V| = |H| = L^2 / 2``.

    **Example:**

    .. code-block:: python

        lattice = nx.ising_lattice(4, temperature=1 / 0.44)
        lattice.log_partition()   # exact, 2^8 states enumerated
    """
    size = int(size)
    if size < 2 or size % 2:
        raise ValueError(f"A checkerboard split needs an even lattice size >= 2, got {size}.")
    dtype = jnp.result_type(float)
    # jnp (not np) so that the coupling, field and temperature may be traced model arguments.
    couplings = jnp.broadcast_to(jnp.asarray(coupling, dtype), (2, size, size)).reshape(-1)
    fields = jnp.broadcast_to(jnp.asarray(field, dtype), (size, size)).reshape(-1)
    white, black = checkerboard_sites(size)
    layer_position = np.empty(size * size, dtype=np.int64)
    layer_position[white] = np.arange(white.size)
    layer_position[black] = np.arange(black.size)
    sites = np.arange(size * size)
    rows, columns = np.divmod(sites, size)
    is_white = (rows + columns) % 2 == 0
    white_ends, black_ends = [], []
    for row_step, column_step in ((0, 1), (1, 0)):  # the bond order of ``coupling``
        neighbours = ((rows + row_step) % size) * size + (columns + column_step) % size
        # Each bond joins one white and one black site; orient it white -> black.
        white_ends.append(layer_position[np.where(is_white, sites, neighbours)])
        black_ends.append(layer_position[np.where(is_white, neighbours, sites)])
    bonds = (np.concatenate(white_ends), np.concatenate(black_ends))
    weights = jnp.zeros((white.size, black.size), dtype).at[bonds].add(couplings)
    return rbm(weights, fields[white], fields[black], temperature=temperature, units="spin")


# ------------------------------------------------------------------------------------------------
# NumPyro models
# ------------------------------------------------------------------------------------------------


def _bipartite_model(machine, visible_name, hidden_name):
    """Both layers as Bernoulli(1/2) sites in plates, with the energy as per-unit factors."""
    low = _low_state(machine.units)
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
        evidence = nx.ais(key, nx.rbm_model, (machine,), num_particles=1000,
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

        evidence = nx.ais(key, nx.ising_model, (4,), {"temperature": 2.5},
                          num_particles=1000, num_temperatures=100)
        exact = nx.ising_lattice(4, temperature=2.5).log_partition()
    """
    machine = ising_lattice(size, coupling, field, temperature=temperature)
    _bipartite_model(machine, "white", "black")


# ------------------------------------------------------------------------------------------------
# Marginalized AIS and AIS with the block-Gibbs kernels of eq. 41-42
# ------------------------------------------------------------------------------------------------


def resolve_side(machine, side):
    """The layer the mAIS chain runs on: ``"V"`` (mAIS-V, sums ``h`` out) or ``"H"``.

    :param BipartiteBoltzmann machine: the machine.
    :param str side: ``"V"``, ``"H"`` or ``"auto"`` (the smaller layer).
    :return: ``"V"`` or ``"H"``.
    :raises ValueError: for another ``side``.
    """
    if side not in SIDES:
        raise ValueError(f"side must be one of {SIDES}, got {side!r}.")
    if side == "auto":
        # Marginalise the larger layer (the mAIS paper's Sec. IV finds it the better side): the
        # chain runs on the smaller one.
        return "V" if machine.num_hidden >= machine.num_visible else "H"
    return side


def _chain_machine(machine, side):
    """The machine oriented so that the mAIS chain runs on its visible layer."""
    return machine if resolve_side(machine, side) == "V" else machine.swap_layers()


def marginal_log_weight_increment(machine):
    """``ln lambda_k(v) = -E_V(v, beta_k) + E_V(v, beta_{k-1})`` (eq. 26), one matmul per call.

    :param BipartiteBoltzmann machine: the machine, oriented so the chain runs on ``v``.
    :return: ``(v, beta_previous, beta) -> ln lambda_k(v)``, the mAIS weight increment.
    """

    def increment(v, beta_previous, beta):
        hidden_fields = machine.hidden_fields(v, 1.0)
        hidden_terms = _log_unit_sum(beta * hidden_fields, machine.units) - _log_unit_sum(
            beta_previous * hidden_fields, machine.units
        )
        visible_term = (v @ machine.visible_bias) / machine.temperature
        return (beta - beta_previous) * visible_term + jnp.sum(hidden_terms, -1)

    return increment


def joint_log_weight_increment(machine):
    """``ln w_k(v, h) = -(beta_k - beta_{k-1}) E(v, h)`` (eq. 12 with a uniform ``P_0``).

    :param BipartiteBoltzmann machine: the machine.
    :return: ``((v, h), beta_previous, beta) -> ln w_k``, the joint AIS weight increment.
    """

    def increment(state, beta_previous, beta):
        v, h = state
        return -(beta - beta_previous) * machine.energy(v, h)

    return increment


def _collapsed_gibbs_step(machine, rng_key, v, beta):
    """``v' ~ tau_k(v' | v) = sum_h P_k(v' | h) P_k(h | v)`` (eq. 41): two half-sweeps."""
    hidden_key, visible_key = jax.random.split(rng_key)
    hidden = machine.sample_hidden(hidden_key, v, beta)
    return machine.sample_visible(visible_key, hidden, beta)


def collapsed_gibbs_transition(machine):
    """The mAIS kernel of eq. 41 in the annealing driver's transition signature.

    :param BipartiteBoltzmann machine: the machine, oriented so the chain runs on ``v``.
    :return: ``(rng_key, v, beta, kernel_state) -> (v', kernel_state, 1.0)``.
    """

    def transition(rng_key, v, beta, kernel_state):
        return _collapsed_gibbs_step(machine, rng_key, v, beta), kernel_state, 1.0

    return transition


def joint_transition(machine, kernel):
    """The joint AIS kernels on ``(v, h)``.

    ``"paired"`` is eq. 42, ``P_k(h' | v') tau_k(v' | v)``: three half-sweeps, the old ``h``
    discarded, so condition (36) holds and Theorems 1-2 apply. ``"gibbs"`` is the plain
    two-half-sweep block Gibbs ``v' ~ P_k(v | h)``, ``h' ~ P_k(h | v')``, which reads the old
    ``h`` and is not covered by the theorems.

    :param BipartiteBoltzmann machine: the machine.
    :param str kernel: one of ``AIS_KERNELS``.
    :return: ``(rng_key, (v, h), beta, kernel_state) -> ((v', h'), kernel_state, 1.0)``.
    """

    def transition(rng_key, state, beta, kernel_state):
        v, h = state
        move_key, hidden_key = jax.random.split(rng_key)
        if kernel == "paired":
            v = _collapsed_gibbs_step(machine, move_key, v, beta)
        else:
            v = machine.sample_visible(move_key, h, beta)
        return (v, machine.sample_hidden(hidden_key, v, beta)), kernel_state, 1.0

    return transition


def _check_particles(num_particles):
    if isinstance(num_particles, bool) or int(num_particles) != num_particles:
        raise ValueError(f"num_particles must be an integer, got {num_particles!r}.")
    if int(num_particles) < 1:
        raise ValueError(f"num_particles must be at least 1, got {num_particles}.")
    return int(num_particles)


def _check_machine(machine):
    if not isinstance(machine, BipartiteBoltzmann):
        raise TypeError(
            f"Expected a BipartiteBoltzmann machine (nx.rbm, nx.random_rbm, nx.ising_lattice), "
            f"got {type(machine).__name__}."
        )


def mais_log_weights(rng_key, machine, inverse_temperatures, num_particles, *, side="auto"):
    """Per-particle log weights ``ln Lambda`` of marginalized AIS (eq. 24-26), traceable.

    The chain starts from uniform ``v`` (exact ``P_0(v)``), accumulates ``ln lambda_k(v^(k))``
    and moves with the collapsed block-Gibbs kernel of eq. 41 at ``beta_k`` for ``k < K``.
    ``exp(ln Lambda)`` is an unbiased estimate of ``Z / Z_0`` with
    ``ln Z_0 = machine.base_log_partition()``. Free of Python-side checks on values, so it can
    be used under ``jit`` and ``vmap`` (e.g. over a batch of machines).

    :param rng_key: PRNG key.
    :param BipartiteBoltzmann machine: the model.
    :param inverse_temperatures: the schedule ``(K + 1,)`` from 0 to 1.
    :param int num_particles: ``N``.
    :param str side: ``"V"`` (mAIS-V: the chain runs on ``v``, ``h`` is summed out), ``"H"``
        (mAIS-H) or ``"auto"`` (sum out the larger layer).
    :return: array ``(N,)``.
    """
    machine = _chain_machine(machine, side)
    initial_key, annealing_key = jax.random.split(rng_key)
    initial_v = machine.sample_uniform(initial_key, (num_particles, machine.num_visible))
    result = anneal(
        annealing_key,
        machine.visible_log_density,
        initial_v,
        collapsed_gibbs_transition(machine),
        inverse_temperatures,
        log_weight_increment_fn=marginal_log_weight_increment(machine),
        progress_bar=False,
    )
    return result.log_weights


def ais_log_weights(rng_key, machine, inverse_temperatures, num_particles, *, kernel="paired"):
    """Per-particle log weights ``ln W`` of joint-space AIS (eq. 10-13), traceable.

    The chain starts from uniform ``(v, h)``, accumulates ``ln w_k = -(beta_k - beta_{k-1}) E``
    and moves with the kernel of eq. 42 (``kernel="paired"``, three half-sweeps, condition 36)
    or plain block Gibbs (``"gibbs"``, not covered by the paper's theorems). ``exp(ln W)`` is
    an unbiased estimate of ``Z / Z_0`` with ``ln Z_0 = n ln 2``.

    :param rng_key: PRNG key.
    :param BipartiteBoltzmann machine: the model.
    :param inverse_temperatures: the schedule ``(K + 1,)`` from 0 to 1.
    :param int num_particles: ``N``.
    :param str kernel: ``"paired"`` or ``"gibbs"``.
    :return: array ``(N,)``.
    """
    if kernel not in AIS_KERNELS:
        raise ValueError(f"kernel must be one of {AIS_KERNELS}, got {kernel!r}.")
    visible_key, hidden_key, annealing_key = jax.random.split(rng_key, 3)
    initial = (
        machine.sample_uniform(visible_key, (num_particles, machine.num_visible)),
        machine.sample_uniform(hidden_key, (num_particles, machine.num_hidden)),
    )
    result = anneal(
        annealing_key,
        lambda state, beta: machine.log_density(*state, beta),
        initial,
        joint_transition(machine, kernel),
        inverse_temperatures,
        log_weight_increment_fn=joint_log_weight_increment(machine),
        progress_bar=False,
    )
    return result.log_weights


class PairedLogWeights(NamedTuple):
    """Per-particle log weights of AIS and mAIS on shared trajectories (:func:`paired_log_weights`).

    :param ais: ``ln W`` of joint AIS with the kernel of eq. 42, shape ``(N,)``.
    :param mais: ``ln Lambda`` of mAIS with the kernel of eq. 41, shape ``(N,)``.
    """

    ais: jax.Array
    mais: jax.Array


def paired_log_weights(rng_key, machine, inverse_temperatures, num_particles, *, side="auto"):
    """AIS and mAIS log weights on the same chain trajectories (mAIS paper Sec. III B, App. A).

    Under condition (36) the joint AIS process is exactly the mAIS chain plus, at every ``k``,
    an independent ``h^(k) ~ P_{k-1}(h | v^(k))`` (App. A, eq. A2-A3). So one run gives both:
    the chain moves ``v`` with eq. 41, accumulates ``ln lambda_k(v^(k))`` (mAIS) and
    ``ln w_k(v^(k), h^(k))`` (AIS). Particle ``mu`` of the two outputs shares its
    ``v``-trajectory, so ``Lambda_mu = E[W_mu | V_mu]`` (eq. A5): the comparison of Theorems 1-2
    with common randomness, at about 1.5 times the cost of mAIS alone. Traceable.

    :param rng_key: PRNG key.
    :param BipartiteBoltzmann machine: the model.
    :param inverse_temperatures: the schedule ``(K + 1,)`` from 0 to 1.
    :param int num_particles: ``N``.
    :param str side: ``"V"``, ``"H"`` or ``"auto"``, as in :func:`mais_log_weights` (the AIS
        kernel is the matching eq. 42 with the layers' roles swapped for ``"H"``).
    :return: :class:`PairedLogWeights`.
    """
    machine = _chain_machine(machine, side)
    joint_increment = joint_log_weight_increment(machine)
    visible_key, hidden_key, annealing_key = jax.random.split(rng_key, 3)
    # h^(1) ~ P_0(h | v^(1)) is uniform.
    initial = (
        machine.sample_uniform(visible_key, (num_particles, machine.num_visible)),
        machine.sample_uniform(hidden_key, (num_particles, machine.num_hidden)),
    )
    marginal_increment = marginal_log_weight_increment(machine)

    def transition(rng_key, state, beta, kernel_state):
        # The driver accumulates the mAIS weight (a function of v alone); the AIS weight needs
        # the random h^(k), so it rides in the kernel state with the previous beta.
        ais_log_weights, beta_previous = kernel_state
        ais_log_weights = ais_log_weights + joint_increment(state, beta_previous, beta)
        v, _ = state
        move_key, hidden_key = jax.random.split(rng_key)
        v = _collapsed_gibbs_step(machine, move_key, v, beta)
        # h^(k+1) ~ P_k(h | v^(k+1)): the third half-sweep of eq. 42.
        state = (v, machine.sample_hidden(hidden_key, v, beta))
        return state, (ais_log_weights, beta), 1.0

    betas = jnp.asarray(inverse_temperatures, dtype=jnp.result_type(float))
    result = anneal(
        annealing_key,
        lambda state, beta: machine.visible_log_density(state[0], beta),
        initial,
        transition,
        betas,
        kernel_state=(jnp.zeros(num_particles, betas.dtype), betas[0]),
        log_weight_increment_fn=lambda state, beta_previous, beta: marginal_increment(
            state[0], beta_previous, beta
        ),
        progress_bar=False,
    )
    # The driver transitions only between weight updates, so the last AIS factor, at
    # (v^(K), h^(K)) with h^(K) ~ P_{K-1}(h | v^(K)), is added here.
    ais_log_weights, beta_previous = result.kernel_state
    ais_log_weights = ais_log_weights + joint_increment(result.positions, beta_previous, betas[-1])
    return PairedLogWeights(ais_log_weights, result.log_weights)


def _schedule(schedule, num_temperatures):
    if isinstance(schedule, str) and num_temperatures is None:
        raise ValueError(f"num_temperatures (K) is needed with schedule={schedule!r}.")
    return inverse_temperature_schedule(schedule, num_temperatures)


def marginalized_ais_boltzmann(
    rng_key, machine, *, num_particles, num_temperatures=None, schedule="linear", side="auto"
) -> Evidence:
    """``log Z`` of a bipartite Boltzmann machine by marginalized AIS (mAIS paper eq. 24-29).

    AIS on the marginal of the tempered joint (eq. 39) with the collapsed block-Gibbs kernel
    (eq. 41), from the uniform ``P_0`` (``ln Z_0 = n ln 2``) to the model, along
    ``E_k = beta_k E``. ``exp(log_z)`` is unbiased for ``Z``; the free-energy estimate
    ``-log_z`` is biased upward (eq. 31), less than joint AIS's (Theorem 2).

    :param rng_key: PRNG key.
    :param BipartiteBoltzmann machine: the model.
    :param int num_particles: ``N``.
    :param int num_temperatures: ``K``, the number of weight factors (``K - 1`` transitions).
    :param schedule: ``"linear"`` (the paper's ``beta_k = k / K``), another name of
        :func:`~numpyro_extras.annealing.inverse_temperature_schedule`, or an array.
    :param str side: ``"V"`` (mAIS-V), ``"H"`` (mAIS-H) or ``"auto"`` (sum out the larger
        layer, the paper's rule).
    :return: :class:`~numpyro_extras.Evidence`; the free energy is ``F = -log_z``.

    **Example:**

    .. code-block:: python

        machine = nx.random_rbm(jax.random.PRNGKey(0), 20, 40, inverse_temperature=4.0)
        evidence = nx.marginalized_ais_boltzmann(
            jax.random.PRNGKey(1), machine, num_particles=1000, num_temperatures=30)
        -evidence.log_z / machine.num_units, machine.free_energy() / machine.num_units
    """
    _check_machine(machine)
    num_particles = _check_particles(num_particles)
    resolve_side(machine, side)
    betas = _schedule(schedule, num_temperatures)
    log_weights = mais_log_weights(rng_key, machine, betas, num_particles, side=side)
    return evidence_from_log_weights(log_weights, float(machine.base_log_partition()))


def ais_boltzmann(
    rng_key,
    machine,
    *,
    num_particles,
    num_temperatures=None,
    schedule="linear",
    kernel="paired",
) -> Evidence:
    """``log Z`` of a bipartite Boltzmann machine by joint-space AIS (mAIS paper eq. 7-16).

    The baseline of the mAIS paper: AIS on ``(v, h)`` with the kernel of eq. 42
    (``kernel="paired"``: ``h~ ~ P_k(h|v)``, ``v' ~ P_k(v|h~)``, ``h' ~ P_k(h|v')``), which
    satisfies condition (36); or plain block Gibbs (``"gibbs"``, not covered by Theorems 1-2).
    Starts from the uniform ``P_0``, ``ln Z_0 = n ln 2``.

    :param rng_key: PRNG key.
    :param BipartiteBoltzmann machine: the model.
    :param int num_particles: ``N``.
    :param int num_temperatures: ``K``.
    :param schedule: ``"linear"`` (default), another schedule name, or an array.
    :param str kernel: ``"paired"`` or ``"gibbs"``.
    :return: :class:`~numpyro_extras.Evidence`; the free energy is ``F = -log_z``.

    **Example:**

    .. code-block:: python

        evidence = nx.ais_boltzmann(key, machine, num_particles=1000, num_temperatures=30)
    """
    _check_machine(machine)
    num_particles = _check_particles(num_particles)
    if kernel not in AIS_KERNELS:
        raise ValueError(f"kernel must be one of {AIS_KERNELS}, got {kernel!r}.")
    betas = _schedule(schedule, num_temperatures)
    log_weights = ais_log_weights(rng_key, machine, betas, num_particles, kernel=kernel)
    # The joint density at beta = 0 is 1 on each of the 2^n states.
    return evidence_from_log_weights(log_weights, machine.num_units * math.log(2.0))


class BoltzmannComparison(NamedTuple):
    """AIS and mAIS estimates from the same trajectories (:func:`mais_vs_ais`).

    :param ais: :class:`~numpyro_extras.Evidence` of joint AIS (eq. 42 kernel); its
        ``log_weights`` are the per-particle ``ln W``.
    :param mais: :class:`~numpyro_extras.Evidence` of mAIS (eq. 41 kernel), ``ln Lambda``.
    :param str side: the layer the chain ran on, ``"V"`` or ``"H"``.
    """

    ais: Evidence
    mais: Evidence
    side: str

    @property
    def ais_free_energy(self) -> float:
        """``F_AIS = -ln Z_AIS`` (eq. 16)."""
        return -self.ais.log_z

    @property
    def mais_free_energy(self) -> float:
        """``F_mAIS = -ln Z_mAIS`` (eq. 29)."""
        return -self.mais.log_z


def mais_vs_ais(
    rng_key, machine, *, num_particles, num_temperatures=None, schedule="linear", side="auto"
) -> BoltzmannComparison:
    """AIS and marginalized AIS of a Boltzmann machine, paired on the same trajectories.

    One chain per particle moves with the collapsed block-Gibbs kernel (eq. 41) and carries
    both weights: mAIS's ``Lambda`` and joint AIS's ``W`` with the eq. 42 kernel, whose ``h``
    at each step is a fresh exact draw (App. A, see :func:`paired_log_weights`).
    Particle by particle, ``Lambda = E[W | v-trajectory]``, so Theorems 1-2 (smaller variance
    of ``Z``-hat, smaller free-energy bias for mAIS) can be checked with little noise.

    :param rng_key: PRNG key.
    :param BipartiteBoltzmann machine: the model.
    :param int num_particles: ``N``.
    :param int num_temperatures: ``K``.
    :param schedule: ``"linear"`` (default), another schedule name, or an array.
    :param str side: ``"V"``, ``"H"`` or ``"auto"`` (sum out the larger layer).
    :return: :class:`BoltzmannComparison`.

    **Example:**

    .. code-block:: python

        machine = nx.random_rbm(jax.random.PRNGKey(0), 20, 40, inverse_temperature=8.0)
        both = nx.mais_vs_ais(key, machine, num_particles=1000, num_temperatures=10)
        exact = machine.free_energy()
        (both.ais_free_energy - exact) / machine.num_units   # about 0.09 per spin
        (both.mais_free_energy - exact) / machine.num_units  # about 0.02 per spin
    """
    _check_machine(machine)
    num_particles = _check_particles(num_particles)
    resolved_side = resolve_side(machine, side)
    betas = _schedule(schedule, num_temperatures)
    weights = paired_log_weights(rng_key, machine, betas, num_particles, side=resolved_side)
    log_z0 = float(machine.base_log_partition())
    return BoltzmannComparison(
        ais=evidence_from_log_weights(weights.ais, log_z0),
        mais=evidence_from_log_weights(weights.mais, log_z0),
        side=resolved_side,
    )
