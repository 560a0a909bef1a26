"""A one-hot categorical distribution, which NumPyro lacks, whose log density is linear in the
one-hot value, so a model written on one-hot vectors is differentiable in its discrete latents
(the gradient ACS needs for categorical sites)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro.distributions import constraints

__all__ = ["OneHotCategorical"]


class _OneHot(constraints.Constraint):
    """One-hot vectors: entries in {0, 1} summing to 1 along the last axis."""

    is_discrete = True
    event_dim = 1

    def __call__(self, x):
        x = jnp.asarray(x)
        binary = (x == 0) | (x == 1)
        return jnp.all(binary, -1) & (jnp.sum(x, -1) == 1)

    def feasible_like(self, prototype):
        return jnp.zeros_like(prototype).at[..., 0].set(1)

    def tree_flatten(self):
        return (), ((), dict())


one_hot = _OneHot()


class OneHotCategorical(dist.Distribution):
    """Categorical distribution over one-hot vectors of length ``K``.

    ``log p(x) = sum_k x_k log softmax(logits)_k``: linear in ``x``, so ``jax.grad`` of a model
    that consumes ``x`` arithmetically (``x @ means``) gives the one-hot gradient ``G_{i,k}`` of
    the ACS paper's eq. 5.

    :param probs: class probabilities, shape ``(..., K)`` (give this or ``logits``).
    :param logits: unnormalised log probabilities, shape ``(..., K)``.

    **Example:**

    .. code-block:: python

        def model(means, y):
            with numpyro.plate("data", len(y)):
                z = numpyro.sample("z", nx.OneHotCategorical(logits=jnp.zeros(3)))
                numpyro.sample("y", dist.Normal(z @ means, 1.0), obs=y)
    """

    arg_constraints = {"logits": constraints.real_vector}
    support = one_hot
    has_enumerate_support = True
    pytree_data_fields = ("logits",)

    def __init__(self, probs=None, logits=None, *, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Give exactly one of `probs` or `logits`.")
        if probs is not None:
            logits = jnp.log(jnp.asarray(probs))
        self.logits = jax.nn.log_softmax(jnp.asarray(logits), -1)
        super().__init__(
            batch_shape=jnp.shape(self.logits)[:-1],
            event_shape=jnp.shape(self.logits)[-1:],
            validate_args=validate_args,
        )

    @property
    def probs(self):
        return jnp.exp(self.logits)

    def sample(self, key, sample_shape=()):
        shape = sample_shape + self.batch_shape
        classes = jax.random.categorical(key, self.logits, -1, shape=shape)
        return jax.nn.one_hot(classes, self.event_shape[-1], dtype=jnp.result_type(float))

    def log_prob(self, value):
        return jnp.sum(value * self.logits, -1)

    def enumerate_support(self, expand=True):
        size = self.event_shape[-1]
        values = jnp.eye(size, dtype=jnp.result_type(float))
        values = values.reshape((size,) + (1,) * len(self.batch_shape) + (size,))
        if expand:
            values = jnp.broadcast_to(values, (size,) + self.batch_shape + (size,))
        return values

    @property
    def mean(self):
        return self.probs

    @property
    def variance(self):
        return self.probs * (1 - self.probs)
