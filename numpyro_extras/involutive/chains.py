"""The Ai-sampler's functional core: one involutive Metropolis-Hastings chain (BlackJAX style).

Each step draws a fresh momentum ``v ~ N(0, I)``, maps ``s = (x, v)`` to ``s' = M(s)`` with the
learned involution of :mod:`numpyro_extras.involutive.networks`, and accepts with probability
``min(1, exp(H(s) - H(s')))``, ``H(x, v) = U(x) + |v|^2 / 2`` (the paper's eq. 3 with
``|det dM/ds| = 1``). ``M`` is an involution for any parameters, so the kernel is reversible with
respect to ``p(x) N(v; 0, I)`` before, during and after training; no gradient of ``U`` is needed.

With ``config.swap_probability > 0`` that share of the steps, chosen independently of the state,
proposes instead from the proposal's ``mixture`` (independence Metropolis-Hastings) or, without
one, with the plain swap of the standardised position and the momentum: each move is exact, so
the mixture of moves is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from numpyro_extras.compiled_chain import BuildTag
from numpyro_extras.involutive.networks import InvolutiveProposal, involution, swap_involution
from numpyro_extras.kernel import field_lookup
from numpyro_extras.metropolis import metropolis_accept, running_accept_mean, select

__all__ = ["AiState", "ai_init", "ai_step", "extended_energy", "involutive_proposal"]


class AiState(NamedTuple):
    """The state of one Ai-sampler chain.

    :param z: the current draw (dict of unconstrained site values for a model, the flat position
        for a ``potential_fn``): the ``sample_field``.
    :param position: the flat unconstrained position.
    :param potential_energy: ``U(position)``.
    :param accept_prob: the last transition's acceptance probability.
    :param mean_accept_prob: the running mean of ``accept_prob`` (restarted after warm-up).
    :param i: transitions so far.
    :param build: the :class:`~numpyro_extras.compiled_chain.BuildTag` of the kernel build.
    :param rng_key: the chain's key.

    **Example:**

    .. code-block:: python

        mcmc = MCMC(nx.AiSampler(model, params=params), num_warmup=200, num_samples=1000)
        mcmc.run(jax.random.PRNGKey(0), x, y)
        mcmc.last_state.mean_accept_prob  # the sampling phase's acceptance
    """

    z: Any
    position: jax.Array
    potential_energy: jax.Array
    accept_prob: jax.Array
    mean_accept_prob: jax.Array
    i: jax.Array
    build: Any
    rng_key: jax.Array

    __getattr__, __getitem__ = field_lookup("An Ai-sampler state", lambda: AiState._fields[:6])


def _identity(position):
    return position


def extended_energy(potential_energy, momentum):
    """``H(x, v) = U(x) + |v|^2 / 2``: the extended target ``p(x) N(v; 0, I)``."""
    return potential_energy + 0.5 * jnp.sum(momentum**2, axis=-1)


def _independence_choice(rng_key, proposal: InvolutiveProposal):
    """Whether this step proposes independently of the state (``config.swap_probability``);
    from a key of its own, so that the momentum, and every run without it, is what it was."""
    return jax.random.uniform(jax.random.fold_in(rng_key, 1)) < proposal.config.swap_probability


def involutive_proposal(rng_key, proposal: InvolutiveProposal, position):
    """Draw ``v ~ N(0, I)`` and map ``(x, v)`` with ``M``, or, with probability
    ``config.swap_probability`` and no ``mixture``, with the plain swap ``S`` (a
    state-independent choice between two involutions, so each step is still an exact
    involutive Metropolis-Hastings move).

    :return: ``(momentum, new_position, new_momentum)``.
    """
    momentum = jax.random.normal(rng_key, jnp.shape(position), position.dtype)
    state = jnp.concatenate([position, momentum], -1)
    image = involution(proposal, state)
    if proposal.config.swap_probability > 0 and proposal.mixture is None:
        use_swap = _independence_choice(rng_key, proposal)
        image = jnp.where(use_swap, swap_involution(proposal, state).astype(image.dtype), image)
    new_position, new_momentum = jnp.split(image, 2, axis=-1)
    return momentum, new_position.astype(position.dtype), new_momentum.astype(position.dtype)


def ai_init(
    position, potential_fn: Callable, rng_key, tag: BuildTag | None = None, unravel_fn=_identity
) -> AiState:
    """The state of a chain at ``position``.

    :param position: flat unconstrained start.
    :param potential_fn: ``x -> U(x)``.
    :param rng_key: the chain's key.
    :param tag: the kernel build's tag.
    :param unravel_fn: flat ``x`` -> the sample field (site values, or ``x`` itself).
    :return: :class:`AiState`.

    **Example:**

    .. code-block:: python

        state = ai_init(jnp.zeros(2), potential_fn, jax.random.PRNGKey(0))
    """
    potential_energy = potential_fn(position)
    zero = jnp.zeros((), jnp.result_type(potential_energy))
    return AiState(
        unravel_fn(position),
        position,
        potential_energy,
        zero,
        zero,
        jnp.zeros((), jnp.int32),
        tag,
        rng_key,
    )


def ai_step(
    state: AiState,
    proposal: InvolutiveProposal,
    potential_fn: Callable,
    num_warmup=0,
    unravel_fn=_identity,
) -> AiState:
    """One involutive Metropolis-Hastings transition (the paper's eq. 3 with a fresh momentum),
    or, in ``config.swap_probability`` of the steps with a ``mixture``, one independence
    Metropolis-Hastings transition from it.

    A proposal where ``U`` is not finite is rejected.

    :param AiState state: the current state.
    :param InvolutiveProposal proposal: the frozen proposal ``M``.
    :param potential_fn: ``x -> U(x)`` (the model's potential for this step's arguments).
    :param int num_warmup: warm-up length (``mean_accept_prob`` restarts after it).
    :param unravel_fn: flat ``x`` -> the sample field.
    :return: the next :class:`AiState`.

    **Example:**

    .. code-block:: python

        state = ai_step(state, proposal, potential_fn)
    """
    rng_key, proposal_key, accept_key = jax.random.split(state.rng_key, 3)
    momentum, position, new_momentum = involutive_proposal(proposal_key, proposal, state.position)
    mixes = proposal.config.swap_probability > 0 and proposal.mixture is not None
    if mixes:
        # Independence Metropolis-Hastings from the mixture of the seed chains' modes, chosen
        # independently of the state; the momentum then plays no part.
        draw = proposal.mixture.sample(jax.random.fold_in(proposal_key, 2))
        from_mixture = _independence_choice(proposal_key, proposal)
        position = jnp.where(from_mixture, draw.astype(position.dtype), position)
    potential_energy = potential_fn(position)
    log_ratio = extended_energy(state.potential_energy, momentum) - extended_energy(
        potential_energy, new_momentum
    )
    if mixes:
        # log [p(x') q(x)] - log [p(x) q(x')]
        mixture_log_ratio = (
            state.potential_energy
            - potential_energy
            + proposal.mixture.log_prob(state.position)
            - proposal.mixture.log_prob(position)
        )
        log_ratio = jnp.where(from_mixture, mixture_log_ratio, log_ratio)
    log_ratio = jnp.where(jnp.isfinite(potential_energy), log_ratio, -jnp.inf)
    accept, accept_prob = metropolis_accept(accept_key, log_ratio)
    position, potential_energy = select(
        accept, (position, potential_energy), (state.position, state.potential_energy)
    )
    iteration = state.i + 1
    return AiState(
        unravel_fn(position),
        position,
        potential_energy,
        accept_prob,
        running_accept_mean(state.mean_accept_prob, accept_prob, iteration, num_warmup),
        iteration,
        state.build,
        rng_key,
    )
