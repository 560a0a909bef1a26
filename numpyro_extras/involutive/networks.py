"""The networks of the Ai-sampler: a Henon flow ``g`` whose conjugation of the momentum flip is
an involution for any parameters, and the C2-equivariant discriminator that trains it.

Egorov, Valperga and Gavves, "Ai-Sampler: Adversarial Learning of Markov kernels with involutive
maps". The proposal on the extended state ``s = (x, v)`` is (eq. 6)

    ``M = g^-1 o R o g``,  ``R(x, v) = (x, -v)``,

so ``M o M = g^-1 R R g = id`` whatever ``g`` is. ``g`` is a stack of Henon layers (eqs. 27-28),
each volume preserving, so ``|det dM/ds| = 1`` and the Metropolis-Hastings ratio needs no
Jacobian. Every layer's shift ``eta`` is one parameter shared by the forward and the inverse map:
stored twice and trained apart, the two copies drift and ``M`` stops being an involution.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from numpyro_extras.shell.validation import check_count, check_real

__all__ = [
    "InvolutionConfig",
    "HenonFlow",
    "Discriminator",
    "InvolutiveProposal",
    "init_proposal",
    "involution",
    "swap_involution",
    "discriminator_logit",
    "flip_momentum",
]


@dataclasses.dataclass(frozen=True)
class InvolutionConfig:
    """The architecture of the Ai-sampler's networks (static: hashable, not a pytree leaf).

    :param int dimension: ``n``, the number of unconstrained dimensions of the target (the
        extended state has ``2n``).
    :param int num_layers: ``K``, Henon layers in ``g``.
    :param int hidden: width of the one hidden layer of each layer's ``V``.
    :param int discriminator_hidden: width of the three hidden layers of the discriminator's
        ``psi`` and ``eta_D``.
    :param bool swap: conjugate the flow by a fixed rotation of each (position, momentum) pair
        and start every ``V`` at zero, so that the untrained ``M`` is the swap
        ``(u, v) -> (v, u)`` of the standardised position and the momentum: an independence
        proposal from the seed draws' Gaussian fit, which training then bends. ``False`` is the
        paper's plain ``g`` with Glorot-normal ``V`` (involutions saved before the option was
        added load that way).
    :param float swap_probability: the share of steps that propose independently of the state
        instead of with the learned ``M``: from the proposal's ``mixture`` (a Gaussian per mode
        the seed chains found) when it has one, else with the plain swap ``S`` of the
        standardised position and the momentum, ``(u, v) -> (v, u)``, an independence proposal
        from the seed draws' Gaussian fit (``S`` is an involution with unit Jacobian too). A
        choice between exact kernels made independently of the state is exact. An involution
        pairs regions, so a learned ``M`` can tie a heavy mode to one light mode and leave a
        third unreached; an independence proposal reaches every mode it spans.
    """

    dimension: int
    num_layers: int = 5
    hidden: int = 32
    discriminator_hidden: int = 128
    swap: bool = True
    swap_probability: float = 0.0

    def __post_init__(self):
        for name in ("dimension", "num_layers", "hidden", "discriminator_hidden"):
            check_count(name, getattr(self, name))
        if not isinstance(self.swap, bool):
            raise TypeError(f"swap must be True or False, got {self.swap!r}.")
        object.__setattr__(
            self,
            "swap_probability",
            check_real(
                "swap_probability",
                self.swap_probability,
                "a number in [0, 1]",
                low=0.0,
                high=1.0,
                open_low=False,
                open_high=False,
            ),
        )


def flip_momentum(state):
    """``R(x, v) = (x, -v)`` on extended states ``(..., 2n)`` (the paper's eq. 5)."""
    position, momentum = jnp.split(state, 2, axis=-1)
    return jnp.concatenate([position, -momentum], axis=-1)


class _HenonPotential(nn.Module):
    """``V``: R^n -> R^n, Dense(hidden) -> ReLU -> Dense(n), Glorot-normal kernels (the output
    kernel zero when ``zero_output``), zero biases."""

    hidden: int
    dimension: int
    zero_output: bool = False

    @nn.compact
    def __call__(self, value):
        init = nn.initializers.glorot_normal()
        hidden = nn.relu(nn.Dense(self.hidden, kernel_init=init)(value))
        output_init = nn.initializers.zeros if self.zero_output else init
        return nn.Dense(self.dimension, kernel_init=output_init)(hidden)


class HenonFlow(nn.Module):
    """``g = h_K o ... o h_1``, Henon layers on ``(a, b)``, ``a`` the position half and ``b``
    the momentum half (eqs. 27-28):

    - forward: ``a' = b + eta``, ``b' = -a + V(b)``;
    - inverse: ``a = -b' + V(a' - eta)``, ``b = a' - eta``.

    Each layer's Jacobian is ``[[0, I], [-I, dV]]``, of determinant 1 for any ``V``.
    ``__call__`` gives ``g``, :meth:`inverse` gives ``g^-1``; both read the same ``eta``.
    """

    dimension: int
    num_layers: int
    hidden: int
    zero_output: bool = False

    def setup(self):
        self.potentials = [
            _HenonPotential(self.hidden, self.dimension, self.zero_output)
            for _ in range(self.num_layers)
        ]
        self.shifts = [
            self.param(f"eta_{layer}", nn.initializers.zeros, (self.dimension,))
            for layer in range(self.num_layers)
        ]

    def __call__(self, state):
        a, b = jnp.split(state, 2, axis=-1)
        for potential, shift in zip(self.potentials, self.shifts, strict=True):
            a, b = b + shift, -a + potential(b)
        return jnp.concatenate([a, b], axis=-1)

    def inverse(self, state):
        a, b = jnp.split(state, 2, axis=-1)
        for potential, shift in zip(self.potentials[::-1], self.shifts[::-1], strict=True):
            a, b = -b + potential(a - shift), a - shift
        return jnp.concatenate([a, b], axis=-1)


class _ScalarMLP(nn.Module):
    """R^{2n} -> R: three hidden ReLU layers of width ``hidden``, then a linear output."""

    hidden: int

    @nn.compact
    def __call__(self, value):
        for _ in range(3):
            value = nn.relu(nn.Dense(self.hidden)(value))
        return nn.Dense(1)(value)[..., 0]


class Discriminator(nn.Module):
    """The product-form discriminator of eq. 13, ``d(s) = psi(s + M s) [eta_D(M s) - eta_D(s)]``,
    with ``psi`` and ``eta_D`` MLPs of three hidden ReLU layers. ``psi``'s input is symmetric
    under ``s <-> M s`` and the bracket antisymmetric, so ``d(M s) = -d(s)`` exactly (eq. 14),
    as the log acceptance ratio ``log lambda`` satisfies (eq. 9).
    """

    hidden: int

    @nn.compact
    def __call__(self, state, image):
        invariant = _ScalarMLP(self.hidden, name="psi")(state + image)
        eta = _ScalarMLP(self.hidden, name="eta")
        return invariant * (eta(image) - eta(state))


@struct.dataclass
class InvolutiveProposal:
    """A (trained) Ai-sampler proposal: the Henon flow's parameters and the affine
    standardisation of the position, with its configuration and the model's sites as static data.

    The proposal works on standardised positions ``u = scale^-1 (x - loc)``, ``scale`` either a
    vector (per-coordinate standard deviations) or a lower-triangular matrix (a Cholesky factor
    of the seed draws' covariance, which whitens correlated posteriors); conjugating ``M`` by this
    fixed affine map keeps it an involution with unit Jacobian in ``(x, v)``.

    :param params: the flow's flax parameters.
    :param loc: standardisation offset ``(n,)``.
    :param scale: standardisation scale, ``(n,)`` or lower-triangular ``(n, n)``.
    :param starts: flat positions ``(S, n)`` where chains may start: the last positions of the
        training's bootstrap chains. The map is learned where the training data lie; a chain
        started far outside them can find every proposal rejected.
    :param InvolutionConfig config: the architecture.
    :param tuple sites: ``((name, unconstrained shape), ...)`` of the model it was trained on
        (empty for a ``potential_fn``).
    :param history: the :class:`~numpyro_extras.involutive.training.TrainingHistory`, or ``None``.
    :param mixture: a :class:`~numpyro_extras.MixtureBase` with a component per mode the seed
        chains found, the independence proposal of ``config.swap_probability`` of the steps;
        ``None``: the plain swap.

    **Example:**

    .. code-block:: python

        params.history  # what the training (nx.train_ai_sampler) did
        kernel = nx.AiSampler(model, params=params)
    """

    params: Any
    loc: jax.Array
    scale: jax.Array
    starts: jax.Array
    config: InvolutionConfig = struct.field(pytree_node=False)
    sites: tuple = struct.field(pytree_node=False, default=())
    history: Any = struct.field(pytree_node=False, default=None)
    mixture: Any = None

    @property
    def dimension(self) -> int:
        return self.config.dimension

    @property
    def marginal_scale(self):
        """The standard deviation of each coordinate under the standardisation, ``(n,)``."""
        scale = jnp.asarray(self.scale)
        return scale if scale.ndim == 1 else jnp.sqrt(jnp.sum(scale**2, axis=-1))

    def standardize(self, position):
        """``u = scale^-1 (x - loc)`` for positions ``(..., n)``."""
        centred = position - self.loc
        if jnp.ndim(self.scale) == 1:
            return centred / self.scale
        flat = centred.reshape(-1, self.dimension).T
        solved = jax.scipy.linalg.solve_triangular(self.scale, flat, lower=True)
        return solved.T.reshape(centred.shape)

    def unstandardize(self, standardized):
        """``x = loc + scale u`` for standardised positions ``(..., n)``."""
        if jnp.ndim(self.scale) == 1:
            return self.loc + self.scale * standardized
        return self.loc + standardized @ self.scale.T


def flow_module(config: InvolutionConfig) -> HenonFlow:
    return HenonFlow(config.dimension, config.num_layers, config.hidden, config.swap)


def discriminator_module(config: InvolutionConfig) -> Discriminator:
    return Discriminator(config.discriminator_hidden)


def init_proposal(rng_key, config: InvolutionConfig, loc=None, scale=None, sites=(), starts=None):
    """An untrained proposal (zero shifts; ``V`` zero with ``config.swap``, else Glorot-normal);
    already exact as an MCMC proposal.

    :param rng_key: key for the initialisation.
    :param InvolutionConfig config: the architecture.
    :param loc: standardisation offset (zeros by default).
    :param scale: standardisation scale, ``(n,)`` or lower-triangular ``(n, n)`` (ones by
        default).
    :param tuple sites: the model's ``((name, shape), ...)``.
    :param starts: where chains may start, ``(S, n)`` (``loc`` by default).
    :return: :class:`InvolutiveProposal`.

    **Example:**

    .. code-block:: python

        proposal = init_proposal(jax.random.PRNGKey(0), InvolutionConfig(dimension=2))
        involution(proposal, jnp.ones(4))
    """
    n = config.dimension
    params = flow_module(config).init(rng_key, jnp.zeros((2 * n,)))["params"]
    loc = jnp.zeros(n) if loc is None else jnp.asarray(loc)
    scale = jnp.ones(n) if scale is None else jnp.asarray(scale)
    starts = loc[None] if starts is None else jnp.asarray(starts)
    return InvolutiveProposal(params, loc, scale, starts, config, tuple(sites))


def _rotate(state, sign):
    """``B(u, v) = ((u - v) / sqrt 2, (u + v) / sqrt 2)`` (``sign=1``) or ``B^-1`` (``sign=-1``),
    a rotation of each (position, momentum) pair: orthogonal, so ``|det B| = 1``."""
    position, momentum = jnp.split(state, 2, axis=-1)
    return jnp.concatenate(
        [position - sign * momentum, sign * position + momentum], axis=-1
    ) / jnp.sqrt(jnp.asarray(2.0, state.dtype))


def standardized_involution(config: InvolutionConfig, params, state):
    """``M(s) = g^-1(R(g(s)))`` on standardised extended states ``(..., 2n)`` (eq. 6).

    With ``config.swap`` the flow is ``g o B``: still an involution with unit Jacobian (``M`` is
    conjugated by the fixed ``B``). A Henon layer with ``V = 0`` and ``eta = 0`` is the quarter
    turn ``(a, b) -> (b, -a)``, so at initialisation ``g^-1 R g`` is ``(u, v) -> (-u, v)`` for an
    odd number of layers and ``R`` for an even one; conjugated by ``B`` both are the swap of
    ``u`` and ``v`` (up to the sign of the momentum, which ``N(0, I)`` does not see). The swap
    keeps ``p(u) N(v; 0, I)`` exactly invariant when ``p`` is the standard normal, so whitened,
    near-Gaussian posteriors are accepted often before any training.
    """
    flow = flow_module(config)
    if config.swap:
        state = _rotate(state, 1)
    image = flow.apply({"params": params}, state)
    image = flow.apply({"params": params}, flip_momentum(image), method=HenonFlow.inverse)
    return _rotate(image, -1) if config.swap else image


def involution(proposal: InvolutiveProposal, state):
    """The proposal map ``M`` on extended states ``s = (x, v)`` in the model's unconstrained
    coordinates: ``x`` standardised, ``M`` applied, and ``x`` mapped back. ``M(M(s)) = s`` and
    ``|det dM/ds| = 1`` for any parameters.

    :param InvolutiveProposal proposal: the proposal.
    :param state: ``(..., 2n)``: positions then momenta.
    :return: ``M(s)``, same shape.
    """
    position, momentum = jnp.split(state, 2, axis=-1)
    standardized = jnp.concatenate([proposal.standardize(position), momentum], -1)
    image = standardized_involution(proposal.config, proposal.params, standardized)
    new_position, new_momentum = jnp.split(image, 2, axis=-1)
    return jnp.concatenate([proposal.unstandardize(new_position), new_momentum], -1)


def swap_involution(proposal: InvolutiveProposal, state):
    """The plain swap ``S(x, v) = (loc + scale v, scale^-1 (x - loc))``, the standardised
    position and the momentum exchanged: an involution with ``|det dS/ds| = 1``, and an
    independence proposal ``x' ~ N(loc, scale scale^T)`` from the seed draws' Gaussian fit.

    :param InvolutiveProposal proposal: the proposal (its standardisation).
    :param state: ``(..., 2n)``: positions then momenta.
    :return: ``S(s)``, same shape.
    """
    position, momentum = jnp.split(state, 2, axis=-1)
    return jnp.concatenate([proposal.unstandardize(momentum), proposal.standardize(position)], -1)


def discriminator_logit(config: InvolutionConfig, discriminator_params, state, image):
    """``d(s)`` of eq. 13 for standardised states ``s`` and their images ``M s``."""
    return discriminator_module(config).apply({"params": discriminator_params}, state, image)
