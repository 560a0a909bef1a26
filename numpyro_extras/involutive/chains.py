"""The Ai-sampler's functional core: one involutive Metropolis-Hastings chain, in BlackJAX's
shape (a :class:`InvolutiveState` and an :class:`InvolutiveInfo`, :func:`init`, and
:func:`build_kernel` returning a pure ``kernel(rng_key, state) -> (state, info)``).

Each step draws a fresh momentum ``v ~ N(0, I)``, maps ``s = (x, v)`` to ``s' = M(s)`` with the
learned involution of :mod:`numpyro_extras.involutive.networks`, and accepts with probability
``min(1, exp(H(s) - H(s')))``, ``H(x, v) = U(x) + |v|^2 / 2`` (the paper's eq. 3 with
``|det dM/ds| = 1``). ``M`` is an involution for any parameters, so the kernel is reversible with
respect to ``p(x) N(v; 0, I)`` before, during and after training; no gradient of ``U`` is needed.

With ``config.swap_probability > 0`` that share of the steps, chosen independently of the state,
proposes instead from the proposal's ``mixture`` (independence Metropolis-Hastings) or, without
one, with the plain swap of the standardised position and the momentum: each move is exact, so
the mixture of moves is.

The core knows nothing of NumPyro: keys, build tags, site values and the running acceptance
belong to the kernel (:class:`~numpyro_extras.involutive.kernels.AiSampler`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from numpyro_extras.involutive.networks import InvolutiveProposal, involution, swap_involution
from numpyro_extras.shell.metropolis import metropolis_accept, select

__all__ = [
    "InvolutiveInfo",
    "InvolutiveState",
    "build_kernel",
    "extended_energy",
    "init",
    "involutive_proposal",
]


class InvolutiveState(NamedTuple):
    """Where one chain is.

    :param position: the flat unconstrained position ``x``.
    :param potential_energy: ``U(x)``.
    """

    position: jax.Array
    potential_energy: jax.Array


class InvolutiveInfo(NamedTuple):
    """What one transition did.

    :param accept_prob: the Metropolis-Hastings acceptance probability of the proposal.
    :param is_accepted: whether the chain moved to it.
    :param proposal: the proposed :class:`InvolutiveState` (its energy ``inf`` where ``U`` is
        not finite).
    """

    accept_prob: jax.Array
    is_accepted: jax.Array
    proposal: InvolutiveState


def extended_energy(potential_energy, momentum):
    """``H(x, v) = U(x) + |v|^2 / 2``: the extended target ``p(x) N(v; 0, I)``."""
    return potential_energy + 0.5 * jnp.sum(momentum**2, axis=-1)


def _independence_choice(rng_key, swap_probability):
    """Whether this step proposes independently of the state (with ``swap_probability``);
    from a key of its own, so that the momentum, and every run without it, is what it was."""
    return jax.random.uniform(jax.random.fold_in(rng_key, 1)) < swap_probability


def involutive_proposal(rng_key, proposal: InvolutiveProposal, position):
    """Draw ``v ~ N(0, I)`` and map ``(x, v)`` with ``M``, or, with probability
    ``config.swap_probability`` and no ``mixture``, with the plain swap ``S`` (a
    state-independent choice between two involutions, so each step is still an exact
    involutive Metropolis-Hastings move).

    :param rng_key: key of the momentum and of the choice of involution.
    :param InvolutiveProposal proposal: the proposal ``M``.
    :param position: flat position ``x``.
    :return: ``(momentum, new_position, new_momentum)``.

    **Example:**

    .. code-block:: python

        momentum, new_position, new_momentum = involutive_proposal(key, proposal, x)
    """
    momentum = jax.random.normal(rng_key, jnp.shape(position), position.dtype)
    state = jnp.concatenate([position, momentum], -1)
    image = involution(proposal, state)
    if proposal.config.swap_probability > 0 and proposal.mixture is None:
        use_swap = _independence_choice(rng_key, proposal.config.swap_probability)
        image = jnp.where(use_swap, swap_involution(proposal, state).astype(image.dtype), image)
    new_position, new_momentum = jnp.split(image, 2, axis=-1)
    return momentum, new_position.astype(position.dtype), new_momentum.astype(position.dtype)


def init(position, potential_fn: Callable) -> InvolutiveState:
    """The state of a chain at ``position``.

    :param position: flat unconstrained start.
    :param potential_fn: ``x -> U(x)``.
    :return: :class:`InvolutiveState`.

    **Example:**

    .. code-block:: python

        state = init(jnp.zeros(2), potential_fn)
    """
    return InvolutiveState(position, potential_fn(position))


def _log_prob_function(mixture):
    """``x -> log q(x)`` of a Gaussian mixture: from factors NumPy inverted once when its arrays
    are concrete (a batched triangular solve compiles to a large loop on CPU), else its own
    jittable ``log_prob``."""
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(mixture)):
        return mixture.log_prob
    potential_fn = mixture.potential_function()
    return lambda position: -potential_fn(position)


def build_kernel(
    proposal: InvolutiveProposal, potential_fn: Callable, swap_probability=None
) -> Callable:
    """The transition of a frozen proposal on the potential ``potential_fn``: one involutive
    Metropolis-Hastings step (the paper's eq. 3 with a fresh momentum) or, in
    ``config.swap_probability`` of the steps when the proposal has a ``mixture``, one
    independence Metropolis-Hastings step from it. A proposal where ``U`` is not finite is
    rejected.

    :param InvolutiveProposal proposal: the proposal ``M``.
    :param potential_fn: ``x -> U(x)``.
    :param swap_probability: with a ``mixture``, the share of independence steps instead of
        ``config.swap_probability``; it may be traced, so that one compiled program runs the
        kernel with and without them (0).
    :return: ``kernel(rng_key, state) -> (state, info)``, pure and traceable
        (:class:`InvolutiveState`, :class:`InvolutiveInfo`).

    **Example:**

    .. code-block:: python

        kernel = jax.jit(build_kernel(proposal, potential_fn))
        state = init(jnp.zeros(2), potential_fn)
        state, info = kernel(jax.random.PRNGKey(0), state)
    """
    if swap_probability is None:
        swap_probability = proposal.config.swap_probability
    traced_share = isinstance(swap_probability, jax.Array)
    mixes = proposal.mixture is not None and (traced_share or swap_probability > 0)
    mixture_log_prob = _log_prob_function(proposal.mixture) if mixes else None

    def when_mixing(mixed_fn, plain_value):
        # A traced share is one number for every chain, so under vmap this stays a branch:
        # steps run without independence proposals skip the mixture's arithmetic.
        if traced_share:
            return jax.lax.cond(swap_probability > 0, mixed_fn, lambda: plain_value)
        return mixed_fn()

    def kernel(rng_key, state: InvolutiveState):
        proposal_key, accept_key = jax.random.split(rng_key)
        momentum, position, new_momentum = involutive_proposal(
            proposal_key, proposal, state.position
        )
        from_mixture = jnp.zeros((), bool)
        if mixes:
            # Independence Metropolis-Hastings from the mixture, chosen independently of the
            # state; the momentum then plays no part.
            def mixture_position():
                draw = proposal.mixture.sample(jax.random.fold_in(proposal_key, 2))
                choice = _independence_choice(proposal_key, swap_probability)
                return jnp.where(choice, draw.astype(position.dtype), position), choice

            position, from_mixture = when_mixing(mixture_position, (position, from_mixture))
        potential_energy = potential_fn(position)
        log_ratio = extended_energy(state.potential_energy, momentum) - extended_energy(
            potential_energy, new_momentum
        )
        if mixes:
            # log [p(x') q(x)] - log [p(x) q(x')]
            def mixture_log_ratio():
                ratio = (
                    state.potential_energy
                    - potential_energy
                    + mixture_log_prob(state.position)
                    - mixture_log_prob(position)
                )
                return jnp.where(from_mixture, ratio.astype(log_ratio.dtype), log_ratio)

            log_ratio = when_mixing(mixture_log_ratio, log_ratio)
        finite = jnp.isfinite(potential_energy)
        log_ratio = jnp.where(finite, log_ratio, -jnp.inf)
        accept, accept_prob = metropolis_accept(accept_key, log_ratio)
        proposed = InvolutiveState(position, jnp.where(finite, potential_energy, jnp.inf))
        new_state = InvolutiveState(*select(accept, tuple(proposed), tuple(state)))
        return new_state, InvolutiveInfo(accept_prob, accept, proposed)

    return kernel
