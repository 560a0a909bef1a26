"""Targets with closed-form answers for the replica-exchange tests."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

from numpyro_extras.exchange.core import swap_log_ratios
from numpyro_extras.shell.metropolis import acceptance_probability

CONJUGATE_DATA = jnp.array([1.0, -2.0, 0.5])
CONJUGATE_NOISE = 0.5


def conjugate_model(y):
    with numpyro.plate("data", 3):
        x = numpyro.sample("x", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(x, CONJUGATE_NOISE), obs=y)


# y ~ N(0, 1 + noise^2) once x is integrated out; the posterior mean is y / (1 + noise^2).
CONJUGATE_LOG_Z = float(
    np.sum(dist.Normal(0.0, np.sqrt(1 + CONJUGATE_NOISE**2)).log_prob(CONJUGATE_DATA))
)
CONJUGATE_POSTERIOR_MEAN = np.asarray(CONJUGATE_DATA) / (1 + CONJUGATE_NOISE**2)

# A broad prior and a likelihood with two separated bumps of unequal mass at -8 and +8:
# the posterior puts exactly LEFT_WEIGHT on the left mode, and log Z = log N(8; 0, sqrt(101)).
LEFT_WEIGHT = 0.3
BIMODAL_LOG_Z = float(dist.Normal(0.0, np.sqrt(101.0)).log_prob(8.0))


def bimodal_likelihood_model(bump_scale=1.0):
    x = numpyro.sample("x", dist.Normal(0.0, 10.0))
    numpyro.factor(
        "bumps",
        jnp.logaddexp(
            jnp.log(LEFT_WEIGHT) + dist.Normal(-8.0, bump_scale).log_prob(x),
            jnp.log(1 - LEFT_WEIGHT) + dist.Normal(8.0, bump_scale).log_prob(x),
        ),
    )


def run(
    kernel,
    *args,
    num_warmup=500,
    num_samples=1500,
    num_chains=2,
    chain_method="vectorized",
    seed=0,
    **kwargs,
):
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=chain_method,
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(seed), *args, **kwargs)
    return mcmc


def swap_matrix(betas, log_likelihood, parity):
    """The exact transition matrix of one swap step on the joint states of the rungs (each rung
    in one of ``len(log_likelihood)`` states, joint states in itertools.product order), from the
    kernel's own acceptance ratios and its pairing rule (every accept pattern of the offered
    gaps, with its probability)."""
    log_likelihood = np.asarray(log_likelihood)
    states = list(itertools.product(range(log_likelihood.size), repeat=len(betas)))
    index = {state: i for i, state in enumerate(states)}
    matrix = np.zeros((len(states), len(states)))
    offered = [gap for gap in range(len(betas) - 1) if gap % 2 == parity]
    for state in states:
        ratios = swap_log_ratios(jnp.asarray(betas), jnp.asarray(log_likelihood[list(state)]))
        accept = np.asarray(acceptance_probability(ratios))
        for pattern in itertools.product([False, True], repeat=len(offered)):
            probability = np.prod(
                [accept[g] if a else 1 - accept[g] for g, a in zip(offered, pattern, strict=True)]
            )
            new = list(state)
            for gap, accepted in zip(offered, pattern, strict=True):
                if accepted:
                    new[gap], new[gap + 1] = new[gap + 1], new[gap]
            matrix[index[state], index[tuple(new)]] += probability
    return matrix
