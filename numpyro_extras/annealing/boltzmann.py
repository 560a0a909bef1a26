"""Boltzmann machines for physicists: RBMs and checkerboard Ising models with exact log Z.

One code path serves every model here: a bipartite Boltzmann machine with visible units ``v``,
hidden units ``h`` and the energy of the mAIS paper's eq. 43,

    E(v, h) = -(1 / T) (b . v + c . h + v^T W h),

with units in ``{-1, +1}`` (``units="spin"``, the paper's) or ``{0, 1}`` (``units="binary"``). A
periodic ``L x L`` Ising lattice split as a checkerboard is the same object with a sparse ``W``
(white sites are the visible layer, black sites the hidden one; mAIS paper Fig. 2). Summing one
layer out analytically gives the marginal energy of eq. 39, which the exact log partition
function (:meth:`BipartiteBoltzmann.log_partition`) enumerates over the smaller layer.

NumPyro models of these machines are in :mod:`numpyro_extras.annealing.boltzmann_models`, and
(marginalized) AIS on them in :mod:`numpyro_extras.annealing.mais`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from numpyro_extras.shell.compilation import quick_jit
from numpyro_extras.shell.validation import check_count, check_rng_key

__all__ = [
    "BipartiteBoltzmann",
    "checkerboard_sites",
    "ising_lattice",
    "log_unit_sum",
    "low_state",
    "random_rbm",
    "rbm",
]

UNITS = ("spin", "binary")
# Enumerating more than 2^MAX_ENUMERATED_UNITS states of the smaller layer takes minutes to hours.
MAX_ENUMERATED_UNITS = 30


def low_state(units):
    """The value of an "off" unit: -1 for spins, 0 for binary units.

    :param str units: ``"spin"`` or ``"binary"``.
    :return: float.
    """
    return -1.0 if units == "spin" else 0.0


def _log_two_cosh(x):
    # ln 2cosh(x) = |x| + log1p(exp(-2|x|)) never overflows, unlike log(2 * cosh(x)).
    magnitude = jnp.abs(x)
    return magnitude + jnp.log1p(jnp.exp(-2.0 * magnitude))


def log_unit_sum(x, units):
    """``log sum_{s in states} exp(s x)`` for one unit: ln 2cosh(x) for spins, softplus for
    binary units (the per-unit terms of eq. 39).

    :param x: the unit's field(s), any shape.
    :param str units: ``"spin"`` or ``"binary"``.
    :return: array of ``x``'s shape.
    """
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
        v = jnp.ones(10)                           # a visible state in {-1, +1}^10
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
        hidden_sums = log_unit_sum(self.hidden_fields(v, beta), self.units)
        return (beta / self.temperature) * (v @ self.visible_bias) + jnp.sum(hidden_sums, -1)

    def hidden_log_density(self, h, beta=1.0):
        """``-E_H(h, beta) = log sum_v exp(-beta E(v, h))`` (eq. 32-33, mAIS-H), shape ``(...)``."""
        return self.swap_layers().visible_log_density(h, beta)

    def _sample_units(self, rng_key, fields):
        """Independent units with ``P(s) ∝ exp(s * field)`` over the two unit states."""
        low = low_state(self.units)
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
        low = low_state(self.units)
        on = jax.random.bernoulli(rng_key, 0.5, shape)
        return jnp.where(on, 1.0, low).astype(jnp.result_type(float))

    def base_log_partition(self):
        """``log Z_0`` of the uniform start ``P_0`` (``n ln 2``).

        It is derived from the same unnormalised marginal density the annealing uses, at
        ``beta = 0``: ``|V| ln 2 + (-E_V(v, 0))`` for any ``v``, so
        the hidden layer's ``|H| ln 2`` can never be dropped on one side only.
        """
        v = jnp.full((self.num_visible,), low_state(self.units))
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


@functools.partial(quick_jit, static_argnums=2)
def _enumerated_log_partition(machine, beta, chunk_size):
    num_states = 2**machine.num_visible
    num_chunks = -(-num_states // chunk_size)
    low = low_state(machine.units)

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
    check_rng_key(rng_key)
    num_visible = check_count("num_visible", num_visible)
    num_hidden = check_count("num_hidden", num_hidden)
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

    **Example:**

    .. code-block:: python

        white, black = nx.checkerboard_sites(4)
        white[:4]  # array([0, 2, 5, 7]): (0, 0), (0, 2), (1, 1), (1, 3)
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
    try:
        size = operator.index(size)
    except TypeError:
        raise TypeError(
            f"size must be an even integer >= 2 (a checkerboard split), got {size!r} "
            f"({type(size).__name__})."
        ) from None
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
