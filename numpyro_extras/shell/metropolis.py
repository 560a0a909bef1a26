"""One Metropolis-Hastings accept/reject step, shared by every kernel that accepts or rejects.

A proposal whose log acceptance ratio is NaN (a non-finite density or gradient somewhere in it)
is a rejection, never a NaN state: numerical failure mid-run is a rejected step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = [
    "acceptance_probability",
    "metropolis_accept",
    "independence_acceptance_rate",
    "running_accept_mean",
    "select",
]


def acceptance_probability(log_ratio):
    """``min(1, exp(log_ratio))``; 0 for a NaN ratio (a numerical failure is a rejection).

    :param log_ratio: the log Metropolis-Hastings ratio (any shape).
    :return: the acceptance probability, same shape.
    """
    log_ratio = jnp.asarray(log_ratio)
    return jnp.where(jnp.isnan(log_ratio), 0.0, jnp.exp(jnp.minimum(log_ratio, 0.0)))


def metropolis_accept(rng_key, log_ratio):
    """Accept a proposal with probability ``min(1, exp(log_ratio))``.

    :param jax.random.PRNGKey rng_key: key for the uniform draw.
    :param log_ratio: the log Metropolis-Hastings ratio; NaN and ``-inf`` give probability 0,
        ``+inf`` gives 1.
    :return: ``(accept, accept_prob)``: a boolean and the acceptance probability.

    **Example:**

    .. code-block:: python

        accept, accept_prob = metropolis_accept(key, log_density(new) - log_density(old))
        state = select(accept, new, old)
    """
    log_ratio = jnp.asarray(log_ratio)
    accept_prob = acceptance_probability(log_ratio)
    uniform = jax.random.uniform(rng_key, jnp.shape(log_ratio), dtype=accept_prob.dtype)
    return uniform < accept_prob, accept_prob


def independence_acceptance_rate(log_weights):
    """The expected acceptance rate of independence Metropolis-Hastings at stationarity,
    estimated from independent proposals' log importance weights ``log w = log p~ - log q``.

    With the current state ``x ~ p`` and a proposal ``x' ~ q`` the acceptance probability is
    ``min(1, w(x') / w(x))`` (Liu, 1996, "Metropolized independent sampling"); ``p`` is stood
    in for by the proposals reweighted by ``w``, so the estimate is
    ``sum_i wbar_i mean_j min(1, w_j / w_i)`` with ``wbar`` the self-normalised weights. A
    proposal that misses a whole mode of ``p`` is not seen to miss it, so this is an upper
    bound in spirit: a small value is a sure sign of trouble, a large one is not a proof of
    health.

    :param log_weights: ``(N,)`` log importance weights (non-finite entries count as zero
        weight).
    :return: the estimated acceptance rate in ``[0, 1]`` (0 when no weight is positive).

    **Example:**

    .. code-block:: python

        log_w = target_log_density(draws) - proposal_log_density(draws)
        independence_acceptance_rate(log_w)  # 1.0 when the proposal is the target
    """
    log_weights = jnp.asarray(log_weights)
    finite = jnp.isfinite(log_weights)
    log_weights = jnp.where(finite, log_weights, -jnp.inf)
    # With no finite weight the softmax is NaN everywhere, and the where below makes it 0.
    state_weights = jax.nn.softmax(log_weights)
    pair_log_ratios = log_weights[None, :] - jnp.where(finite, log_weights, 0.0)[:, None]
    rates = jnp.mean(acceptance_probability(pair_log_ratios), axis=1)
    return jnp.sum(jnp.where(finite, state_weights * rates, 0.0))


def select(accept, new, old):
    """``new`` where ``accept`` else ``old``, leaf by leaf over two pytrees of the same shape.

    :param accept: a boolean scalar (or an array broadcasting against every leaf).
    :param new: the proposed pytree.
    :param old: the current pytree.
    :return: the selected pytree.
    """
    return jax.tree.map(lambda new_leaf, old_leaf: jnp.where(accept, new_leaf, old_leaf), new, old)


def running_accept_mean(previous, accept_prob, iteration, num_warmup):
    """The running mean of acceptance probabilities after transition ``iteration`` (1-based),
    restarted when warm-up ends so that after warm-up it describes the kept draws.

    :param previous: the mean after the previous transition.
    :param accept_prob: this transition's acceptance probability.
    :param iteration: transitions so far, this one included.
    :param int num_warmup: warm-up length.
    :return: the updated mean.
    """
    kept = iteration - num_warmup
    count = jnp.where(kept > 0, kept, iteration).astype(accept_prob.dtype)
    previous = jnp.where(kept == 1, 0.0, previous)
    return previous + (accept_prob - previous) / count
