"""The functional core of VAE self-learning Monte Carlo, in BlackJAX's shape: a
:class:`ChainPoint` state and an :class:`SLMCInfo`, :func:`init`, and :func:`build_kernel`
returning a pure ``kernel(rng_key, state, beta) -> (state, info)``. The kernel of
:mod:`numpyro_extras.slmc.kernels` runs it under NumPyro's ``MCMC`` (keys, build tags, site
values and the running acceptance belong there); the annealing driver of
:mod:`numpyro_extras.slmc.annealing` runs it at every rung's ``beta``.

**Exact acceptance (the default).** The chain lives on the extended space ``(x, z)`` with target
``p~(x)^beta r(z | x)``, ``r`` the encoder; its ``x``-marginal is ``p(x)^beta`` for any network,
since ``r(. | x)`` integrates to one. A move is

1. a Gibbs refresh ``z ~ r(. | x)`` (the exact conditional);
2. an independence proposal ``(x', z') ~ q``, ``q(x, z) = N(z; 0, I) N(x; Dec(z), s^2 I)``,
   accepted with probability ``min(1, W(x', z') / W(x, z))``, where
   ``log W = beta log p~(x) + log r(z | x) - log q(x, z)``.

**Isometric acceptance** (the paper's eq. 6): ``x' = Dec(z')`` and
``log W = beta log p~(x) - log Gamma(x)`` with ``Gamma`` of eq. 3, exact only when the VAE is
isometric.

**Several latents** (``num_latents = K > 1``, exact acceptance): the target is
``p~(x)^beta prod_k r(z_k | x)`` and the proposal draws ``z_1 ~ N(0, I)``, ``x ~ q(x | z_1)`` and
``z_2..z_K ~ r(. | x)``, whose density, symmetrised over which latent generated ``x``, is
``(1/K) sum_j q(x, z_j) prod_{k != j} r(z_k | x)``. The weight becomes
``log W = beta log p~(x) - log mean_k q(x, z_k) / r(z_k | x)``: the ratio ``q / r`` is averaged
over ``K`` latents as in an importance-weighted bound, so a network whose encoder is only
roughly the decoder's posterior is accepted far more often, and the ``x``-marginal is still
``p(x)^beta``.

Since proposals do not depend on the state, ``W(x', z')`` at ``beta = 1`` is an importance weight
of the target against ``q``: its mean over proposals is an unbiased estimate of ``Z`` (the
normalising constant of ``p~``), kept as each step's ``proposal_log_weight``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from numpyro_extras.exchange.core import swap_log_ratios
from numpyro_extras.shell.metropolis import (
    acceptance_probability,
    metropolis_accept,
    select,
)
from numpyro_extras.shell.validation import check_count
from numpyro_extras.slmc.vae import (
    VAEConfig,
    VAEProposal,
    encode,
    isometric_log_density,
    log_encoder_density,
    log_proposal_density,
    sample_extended,
    sample_isometric,
)

__all__ = [
    "ACCEPTANCES",
    "ChainPoint",
    "SLMCInfo",
    "build_kernel",
    "check_acceptance",
    "check_latents",
    "draw_proposal",
    "exchange_source",
    "init",
    "log_correction",
    "new_point",
    "refresh_latent",
    "shared_uniform_rates",
]

ACCEPTANCES = ("exact", "isometric")


class ChainPoint(NamedTuple):
    """A state of the extended chain with what its acceptance needs.

    :param position: flat unconstrained point ``x``, ``(D,)``.
    :param latent: ``z``, ``(M,)`` (in isometric mode, the latent the proposal came from; not
        part of the target), or ``(K, M)`` for ``K`` latents (exact mode).
    :param log_density: ``log p~(x)``, the model's log density (``-`` potential energy).
    :param correction: ``log r(z | x) - log q(x, z)`` (exact) or ``-log p_theta(x)``
        (isometric), so that ``log W = beta log_density + correction``.
    """

    position: jax.Array
    latent: jax.Array
    log_density: jax.Array
    correction: jax.Array

    def log_weight(self, beta):
        """``log W`` of the point on the tempered target ``p~^beta``."""
        return beta * self.log_density + self.correction


def _finite_or(value, fallback):
    # A NaN density (numerical failure) or correction counts as zero weight: the point is
    # rejected, and an importance weight of NaN would poison the log Z estimate.
    return jnp.where(jnp.isnan(value), fallback, value)


def log_correction(proposal: VAEProposal, acceptance, position, latent):
    """The part of ``log W`` that does not depend on ``beta``.

    :param proposal: the VAE proposal.
    :param str acceptance: ``"exact"`` or ``"isometric"``.
    :param position: ``x``, ``(D,)``.
    :param latent: ``z``, ``(M,)``, or ``(K, M)`` for ``K`` latents (ignored when isometric).
    :return: ``log r(z | x) - log q(x, z)``, ``-log mean_k q(x, z_k) / r(z_k | x)`` for ``K``
        latents, or ``-log p_theta(x)`` (eq. 12).
    """
    if acceptance == "isometric":
        return -isometric_log_density(proposal, position)

    def log_ratio(one_latent):
        return log_encoder_density(proposal, position, one_latent) - log_proposal_density(
            proposal, position, one_latent
        )

    if latent.ndim == 1:
        return log_ratio(latent)
    log_ratios = jax.vmap(log_ratio)(latent)
    return -(jax.nn.logsumexp(-log_ratios) - jnp.log(latent.shape[0]))


def new_point(proposal, acceptance, log_density_fn, position, latent):
    """A :class:`ChainPoint` at ``(position, latent)``, the model and the network evaluated."""
    log_density = _finite_or(log_density_fn(position), -jnp.inf)
    correction = _finite_or(log_correction(proposal, acceptance, position, latent), -jnp.inf)
    return ChainPoint(position, latent, log_density, correction)


def draw_proposal(rng_key, proposal, acceptance, log_density_fn, num_latents=None) -> ChainPoint:
    """An independent proposal ``(x', z') ~ q`` (exact) or ``x' = Dec(z')`` (isometric, eq. 6),
    evaluated; with ``num_latents = K`` (exact), ``K`` latents.

    :return: :class:`ChainPoint`.
    """
    if acceptance == "isometric":
        position, latent = sample_isometric(rng_key, proposal)
    else:
        position, latent = sample_extended(rng_key, proposal, num_latents)
    return new_point(proposal, acceptance, log_density_fn, position, latent)


def refresh_latent(rng_key, point: ChainPoint, proposal, acceptance) -> ChainPoint:
    """The exact Gibbs move ``z ~ r(. | x)`` of the extended target (exact mode), with the
    correction recomputed; in isometric mode the correction is recomputed for ``proposal`` (after
    an exchange a point may come from another model's chain).
    """
    latent = point.latent
    if acceptance == "exact":
        mean, log_var = encode(proposal, point.position)
        noise = jax.random.normal(rng_key, latent.shape, mean.dtype)
        latent = (mean + jnp.exp(0.5 * log_var) * noise).astype(point.latent.dtype)
    correction = log_correction(proposal, acceptance, point.position, latent)
    return point._replace(latent=latent, correction=_finite_or(correction, -jnp.inf))


class SLMCInfo(NamedTuple):
    """What one transition did.

    :param accept_prob: the Metropolis-Hastings acceptance probability of the proposal.
    :param is_accepted: whether the chain moved to it.
    :param proposal: the proposed :class:`ChainPoint`; at ``beta = 1`` its ``log_weight(1.0)``
        is the importance weight of ``p~`` against ``q``.
    """

    accept_prob: jax.Array
    is_accepted: jax.Array
    proposal: ChainPoint


def init(
    position,
    log_density_fn: Callable,
    proposal: VAEProposal,
    rng_key,
    *,
    acceptance="exact",
    num_latents=1,
) -> ChainPoint:
    """The state of a chain at ``position``, its latent drawn from the encoder ``r(. | x)``.

    :param position: flat unconstrained start ``x``, ``(D,)``.
    :param log_density_fn: ``x -> log p~(x)``.
    :param VAEProposal proposal: the frozen proposal.
    :param rng_key: key of the latent.
    :param str acceptance: ``"exact"`` (extended space) or ``"isometric"`` (eq. 6 with eq. 3).
    :param int num_latents: latents per state of the exact acceptance (``K``).
    :return: :class:`ChainPoint`.

    **Example:**

    .. code-block:: python

        state = init(jnp.zeros(2), log_density_fn, proposal, jax.random.PRNGKey(0))
    """
    latent_shape = check_latents(num_latents, acceptance) + (proposal.latent_dim,)
    latent = jnp.zeros(latent_shape, position.dtype)
    point = new_point(proposal, acceptance, log_density_fn, position, latent)
    return refresh_latent(rng_key, point, proposal, acceptance)


def build_kernel(
    proposal: VAEProposal, log_density_fn: Callable, *, acceptance="exact"
) -> Callable:
    """The transition of a frozen proposal on ``p~^beta r``: a latent refresh, then an
    independence Metropolis-Hastings step (eq. 6 with the extended-space weights, or with
    ``Gamma``). A proposal where ``p~`` or the network is not finite is rejected.

    :param VAEProposal proposal: the frozen proposal.
    :param log_density_fn: ``x -> log p~(x)``.
    :param str acceptance: ``"exact"`` or ``"isometric"``.
    :return: ``kernel(rng_key, state, beta=1.0) -> (state, info)``, pure and traceable
        (:class:`ChainPoint`, :class:`SLMCInfo`); ``beta`` is the target's inverse temperature.

    **Example:**

    .. code-block:: python

        kernel = jax.jit(build_kernel(proposal, log_density_fn))
        state = init(jnp.zeros(2), log_density_fn, proposal, jax.random.PRNGKey(0))
        state, info = kernel(jax.random.PRNGKey(1), state)
    """
    check_acceptance(acceptance, proposal.config)

    def kernel(rng_key, state: ChainPoint, beta=1.0):
        refresh_key, proposal_key, accept_key = jax.random.split(rng_key, 3)
        state = refresh_latent(refresh_key, state, proposal, acceptance)
        num_latents = state.latent.shape[0] if state.latent.ndim == 2 else None
        proposed = draw_proposal(proposal_key, proposal, acceptance, log_density_fn, num_latents)
        log_ratio = proposed.log_weight(beta) - state.log_weight(beta)
        accept, accept_prob = metropolis_accept(accept_key, log_ratio)
        return select(accept, proposed, state), SLMCInfo(accept_prob, accept, proposed)

    return kernel


def check_acceptance(acceptance, config: VAEConfig | None = None) -> str:
    """Check the name of an acceptance, and that a VAE of ``config`` can use it: the isometric
    density (eq. 3, eq. 12) assumes eq. 2's fixed decoder noise ``s^2 = beta_VAE / 2``.

    :raises ValueError: for an unknown name, or the isometric acceptance with a learned decoder
        noise.

    **Example:**

    .. code-block:: python

        check_acceptance("isometric", proposal.config)
    """
    if acceptance not in ACCEPTANCES:
        raise ValueError(f"acceptance must be one of {ACCEPTANCES}, got {acceptance!r}.")
    if acceptance == "isometric" and config is not None and config.learn_decoder_scale:
        raise ValueError(
            "acceptance='isometric' needs a VAE with eq. 2's fixed decoder noise, but this one "
            "learned its decoder scale; train it with learn_decoder_scale=False, or use "
            "acceptance='exact'."
        )
    return acceptance


def check_latents(num_latents, acceptance) -> tuple[int, ...]:
    """Check ``num_latents`` and return the latent's leading shape: ``()`` for one latent,
    ``(K,)`` for ``K`` (exact acceptance only).

    :raises TypeError: for a count that is not an integer.
    :raises ValueError: for a count below 1, or several latents with the isometric acceptance.

    **Example:**

    .. code-block:: python

        check_latents(4, "exact")  # (4,)
    """
    num_latents = check_count("num_latents", num_latents)
    if num_latents > 1 and acceptance != "exact":
        raise ValueError("num_latents > 1 needs acceptance='exact' (the extended target).")
    return () if num_latents == 1 else (num_latents,)


def shared_uniform_rates(log_weight_parts, start_parts, betas, uniforms):
    """Acceptance rates of independence chains on every candidate ``beta`` at once, from one
    batch of proposals and shared uniforms (the vectorised form of Algorithm 4's search: every
    candidate sees the same proposals and random numbers, so the rates are comparable and the
    model is evaluated once for the whole grid).

    :param log_weight_parts: ``(log p~(x'_t), correction_t)`` of the proposals, each
        ``(C, T)`` for ``C`` chains of ``T`` steps.
    :param start_parts: ``(log p~(x_0), correction_0)`` of the chains' starting points, ``(C,)``.
    :param betas: candidate inverse temperatures, ``(G,)``.
    :param uniforms: ``(C, T)`` uniforms in ``[0, 1)``, shared by every candidate.
    :return: ``(mean_accept_prob, accept_fraction)``, each ``(G,)``, averaged over chains and
        steps.
    """
    proposal_density, proposal_correction = log_weight_parts
    start_density, start_correction = start_parts

    def rate(beta):
        proposed = beta * proposal_density + proposal_correction

        def chain(current, inputs):
            candidate, uniform = inputs
            prob = acceptance_probability(candidate - current)
            accept = uniform < prob
            return jnp.where(accept, candidate, current), (prob, accept)

        def one_chain(start, candidates, chain_uniforms):
            _, (prob, accept) = jax.lax.scan(chain, start, (candidates, chain_uniforms))
            return prob, accept

        start = beta * start_density + start_correction
        prob, accept = jax.vmap(one_chain)(start, proposed, uniforms)
        return jnp.mean(prob), jnp.mean(accept.astype(prob.dtype))

    return jax.lax.map(rate, betas)


def exchange_source(rng_key, betas, log_densities):
    """One exchange of the parallel annealing (Algorithm 6, eq. 5): a uniformly chosen adjacent
    pair ``(j, j + 1)`` of models swaps states with probability
    ``min(1, exp((beta_j - beta_{j+1}) (log p~(x_{j+1}) - log p~(x_j))))`` (always when the
    betas are equal).

    :param rng_key: key.
    :param betas: the models' inverse temperatures, ``(J,)`` with ``J >= 2``.
    :param log_densities: ``log p~`` of the models' current states, ``(J,)``.
    :return: ``(source, accept_prob)``: model ``j`` takes the state of model ``source[j]``.

    **Example:**

    .. code-block:: python

        source, _ = exchange_source(key, betas, points.log_density)
        points = jax.tree.map(lambda leaf: leaf[source], points)
    """
    pair_key, accept_key = jax.random.split(rng_key)
    num_models = betas.shape[0]
    pair = jax.random.randint(pair_key, (), 0, num_models - 1)
    log_ratio = swap_log_ratios(betas, log_densities)[pair]
    accept, accept_prob = metropolis_accept(accept_key, log_ratio)
    models = jnp.arange(num_models)
    swapped = jnp.where(models == pair, pair + 1, jnp.where(models == pair + 1, pair, models))
    return jnp.where(accept, swapped, models), accept_prob
