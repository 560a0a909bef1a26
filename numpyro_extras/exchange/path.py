"""The path of distributions a replica-exchange ladder runs on.

Replica ``i`` at inverse temperature ``beta_i`` targets

    ``log pi_beta(x) = log r(x) + beta l(x)``,   ``l(x) = log p(x, y) - log r(x)``,

on the model's flat unconstrained space, from a normalised reference ``r`` (``beta = 0``) to the
posterior (``beta = 1``). With the prior as the reference, ``log r`` is the log density of the
latent sites with the Jacobians of their constraining transforms, and ``l`` is everything else
the model scores: observed sites and ``numpyro.factor`` terms (Syed et al., "Non-reversible
parallel tempering", JRSSB 2022, eq. 2). With a fitted Gaussian (mixture) reference ``q`` the
path is the geometric one of continuous tempering, ``(1 - beta) log q + beta log p(x, y)``
(Surjanovic et al., "Parallel tempering with a variational reference", NeurIPS 2022).

A replica's potential is ``U_beta(x) = reference_potential(x) - beta l(x)``; a swap and the
stepping-stone estimate of ``log Z`` need only ``l``.

For a model whose latent sites are all discrete, the same prior path runs on the sites' values
(a dict by site name) instead of a flat vector: ``log r`` is the log probability of the sample
sites and ``l`` every observed site and ``factor`` term, so a discrete energy model written
with ``numpyro.factor`` is tempered in its energy and its ``beta = 0`` replica is the base
distribution of its sample sites. For a model with both, a position is a
:class:`MixedPosition` of the two.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from numpyro_extras.model.potential import SplitModel

__all__ = ["MixedPosition", "TemperedPath", "prior_path", "reference_path"]


class MixedPosition(NamedTuple):
    """A point of a model with continuous and discrete latent sites.

    :param continuous: the flat unconstrained vector of the continuous sites, shape ``(D,)``.
    :param discrete: dict name -> the discrete sites' values (or, in a replica's cache, their
        indices).
    """

    continuous: jax.Array
    discrete: dict


class TemperedPath(NamedTuple):
    """A path from a normalised reference to an unnormalised target, on flat positions.

    :param reference_potential_fn: ``x -> -log r(x)``, ``r`` normalised.
    :param log_likelihood_fn: ``x -> l(x) = log target(x) - log r(x)``.
    :param sample_reference_fn: ``rng_key -> x``, an exact draw from ``r``.
    :param str reference: ``"prior"`` or ``"fit"`` (what ``r`` is, for messages and results).
    """

    reference_potential_fn: Callable[[jax.Array], jax.Array]
    log_likelihood_fn: Callable[[jax.Array], jax.Array]
    sample_reference_fn: Callable[[jax.Array], jax.Array]
    reference: str

    def potential_fn(self, beta):
        """``x -> U_beta(x) = -log r(x) - beta l(x)``, the potential of the replica at ``beta``."""

        def potential(position):
            return self.reference_potential_fn(position) - beta * self.log_likelihood_fn(position)

        return potential


def prior_path(split: SplitModel) -> TemperedPath:
    """The path from the model's prior to its posterior: ``log p0(x) + beta log p(y | x)``
    (Syed et al. eq. 2).

    A position is the flat unconstrained vector of a model with continuous latent sites, or,
    for a model whose latent sites are all discrete, the dict of their values (the model's
    values: floats are accepted where the model uses them arithmetically, so that the path can
    be differentiated in them), or, for a model with both, a :class:`MixedPosition` of the two.

    :param SplitModel split: the model's prior/likelihood split
        (:func:`~numpyro_extras.model.potential.split_model`).
    :return: a :class:`TemperedPath` whose reference draws are exact prior draws (a seeded trace
        of the model, moved to the unconstrained space for continuous sites).
    :raises ValueError: for a model with both discrete and continuous latent sites.

    **Example:**

    .. code-block:: python

        path = prior_path(split_model(key, model, (x, y)))
        path.potential_fn(0.5)(x0)   # -log p0(x0) - 0.5 log p(y | x0)
        ising = prior_path(split_model(key, nx.ising_model, (4,)))
        ising.log_likelihood_fn({"white": w, "black": b})  # -E(s) + 16 log 2
        mixed = prior_path(split_model(key, spike_and_slab, (x, y)))
        mixed.potential_fn(0.5)(MixedPosition(x0, {"gamma": gamma0}))
    """
    discrete = bool(split.discrete_sites)
    mixed = discrete and split.dimension > 0
    no_continuous = jnp.zeros((0,))

    def parts(position):
        """``(x, discrete values)`` of a position."""
        if mixed:
            return position
        return (no_continuous, position) if discrete else (position, {})

    def reference_potential_fn(position):
        return -split.log_prior_fn(*parts(position))

    def log_likelihood_fn(position):
        return split.log_likelihood_fn(*parts(position))

    def sample_reference_fn(rng_key):
        positions, values = split.sample_prior_fn(rng_key, 1)
        values = jax.tree.map(lambda value: value[0], values)
        if mixed:
            return MixedPosition(positions[0], values)
        return values if discrete else positions[0]

    return TemperedPath(reference_potential_fn, log_likelihood_fn, sample_reference_fn, "prior")


def reference_path(target_potential_fn, base) -> TemperedPath:
    """The geometric path from a normalised base ``q`` to the target ``exp(-phi)``.

    :param target_potential_fn: ``phi``, the target's potential on flat positions.
    :param base: a :class:`~numpyro_extras.GaussianBase` or :class:`~numpyro_extras.MixtureBase`
        (its ``log_zeta`` is not used).
    :return: a :class:`TemperedPath` with ``l = psi - phi``, ``psi = -log q``.

    **Example:**

    .. code-block:: python

        path = reference_path(flat.potential_fn, nx.fit_base(key, model, (x, y)))
    """
    base_potential = base.potential_function()

    def log_likelihood_fn(position):
        return base_potential(position) - target_potential_fn(position)

    def sample_reference_fn(rng_key):
        return base.sample(rng_key)

    return TemperedPath(base_potential, log_likelihood_fn, sample_reference_fn, "fit")


def value_and_gradient(function):
    """``x -> (f(x), grad f(x))`` with a NaN gradient mapped to a non-finite value, so that a
    point where either fails is recognised by its value alone."""
    value_and_grad = jax.value_and_grad(function)

    def evaluate(position):
        value, gradient = value_and_grad(position)
        finite = jnp.all(jnp.isfinite(gradient))
        return jnp.where(finite, value, jnp.nan), gradient

    return evaluate
