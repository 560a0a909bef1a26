r"""Gaussian targets whose log normalizer is known in closed form.

``log Z`` is the log integral of ``exp(-phi)`` over NumPyro's unconstrained space, as defined in
:mod:`numpyro_extras.targets`.

* :func:`bimodal_model` -- the one-dimensional two-mode toy of Sec. 7.1 of the continuous
  tempering paper (Graham & Storkey, 2017), with :math:`\log Z` chosen by the caller; its exact
  mode masses are :data:`BIMODAL_WEIGHTS` (compare with :func:`bimodal_mode_weights`).
* :func:`gaussian_model` -- a multivariate normal with :math:`\log Z` chosen by the caller.
* :func:`linear_regression_model` -- Bayesian linear regression with a closed-form evidence
  (:func:`linear_regression_log_evidence`) and simulated data
  (:func:`make_linear_regression_data`).
* :func:`centred_funnel_model` -- Neal's funnel in its centred form with a Gaussian observation
  of each effect, whose evidence (:func:`centred_funnel_log_evidence`) is a one-dimensional
  integral, done by quadrature.
"""

import math

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import scipy.integrate
import scipy.linalg
import scipy.stats

__all__ = [
    "BIMODAL_LOCS",
    "BIMODAL_SCALES",
    "BIMODAL_WEIGHTS",
    "FUNNEL_DATA",
    "bimodal_mode_weights",
    "bimodal_model",
    "centred_funnel_log_evidence",
    "centred_funnel_model",
    "gaussian_model",
    "linear_regression_log_evidence",
    "linear_regression_model",
    "make_linear_regression_data",
]

# ------------------------------------------------------------------------------------------------
# One-dimensional bimodal target (paper Sec. 7.1, Fig. 1)
# ------------------------------------------------------------------------------------------------

#: Mixture weights of the bimodal target 0.6 N(-8, 1^2) + 0.4 N(8, 2^2).
BIMODAL_WEIGHTS = (0.6, 0.4)
#: Component means of the bimodal target.
BIMODAL_LOCS = (-8.0, 8.0)
#: Component standard deviations of the bimodal target.
BIMODAL_SCALES = (1.0, 2.0)


def bimodal_model(log_scale=0.0):
    """
    One-dimensional bimodal target of the continuous tempering paper (Sec. 7.1, Fig. 1):
    the normalised mixture ``0.6 N(-8, 1^2) + 0.4 N(8, 2^2)`` multiplied by ``exp(log_scale)``.

    The model has a single latent site ``"x"`` (a scalar) and a factor site ``"scale"``
    contributing the constant ``log_scale``, so that the potential energy is
    ``-log p(x) - log_scale`` and the log normalizer is exactly ``log Z = log_scale``. A
    non-zero ``log_scale`` is useful to check that an estimator of ``log Z`` does not silently
    assume a normalised target. Plain HMC started near either mode essentially never crosses the
    barrier between them, which is what tempering is meant to fix; the true mode masses are
    :data:`BIMODAL_WEIGHTS` (compare with :func:`bimodal_mode_weights`).

    :param float log_scale: log normalizer of the target.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import bimodal_model, bimodal_mode_weights
        mcmc = MCMC(NUTS(bimodal_model), num_warmup=200, num_samples=200, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0), log_scale=2.0)
        negative_mass, positive_mass = bimodal_mode_weights(mcmc.get_samples()["x"])
    """
    mixture = dist.MixtureSameFamily(
        dist.Categorical(probs=jnp.array(BIMODAL_WEIGHTS)),
        dist.Normal(jnp.array(BIMODAL_LOCS), jnp.array(BIMODAL_SCALES)),
    )
    numpyro.sample("x", mixture)
    numpyro.factor("scale", log_scale)


def bimodal_mode_weights(x, weights=None):
    """
    Fraction of (optionally weighted) draws in each mode of the bimodal target, split at zero.

    The exact values for :func:`bimodal_model` are :data:`BIMODAL_WEIGHTS` = ``(0.6, 0.4)``: the
    mass between the modes assigned to the wrong side of zero is below ``1e-4``.

    :param x: draws of the site ``"x"``, any shape (e.g. ``[num_chains, num_samples]``); flattened.
    :param weights: optional non-negative importance weights with the same number of elements as
        ``x``, e.g. the tempering weights ``w1(x)`` of eq. 21. Need not be normalised.
    :return: array of shape ``[2]`` with the fraction of (weighted) draws with ``x < 0`` and with
        ``x >= 0``; the two entries sum to one.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import bimodal_mode_weights
        fractions = bimodal_mode_weights(np.array([-8.1, -7.9, 8.3, -8.0]))
        [float(fraction) for fraction in fractions]  # [0.75, 0.25]
    """
    x = jnp.ravel(jnp.asarray(x))
    if weights is None:
        weights = jnp.ones_like(x)
    else:
        weights = jnp.ravel(jnp.asarray(weights)).astype(x.dtype)
    negative_mass = jnp.sum(jnp.where(x < 0, weights, 0.0))
    total_mass = jnp.sum(weights)
    negative_fraction = negative_mass / total_mass
    return jnp.stack([negative_fraction, 1.0 - negative_fraction])


# ------------------------------------------------------------------------------------------------
# Multivariate normal
# ------------------------------------------------------------------------------------------------


def gaussian_model(loc, scale_tril, log_scale=0.0):
    """
    Multivariate normal target ``N(loc, scale_tril @ scale_tril.T)`` multiplied by
    ``exp(log_scale)``.

    The model has a single latent site ``"x"`` with event shape ``[D]`` and a factor site
    ``"scale"`` contributing ``log_scale``, so that ``log Z = log_scale`` exactly. Useful as the
    simplest sanity check of a normalizer estimator (e.g. with a Gaussian base of a different
    mean and covariance).

    :param loc: mean, shape ``[D]``.
    :param scale_tril: lower-triangular Cholesky factor of the covariance, shape ``[D, D]``.
    :param float log_scale: log normalizer of the target.

    **Example:**

    .. code-block:: python

        from numpyro.infer.util import potential_energy
        from numpyro_extras.targets import gaussian_model
        args, kwargs = (jnp.zeros(3), jnp.eye(3)), {"log_scale": -1.5}
        potential_energy(gaussian_model, args, kwargs, {"x": jnp.zeros(3)})  # 1.5 + 1.5 log(2 pi)
    """
    numpyro.sample("x", dist.MultivariateNormal(loc, scale_tril=scale_tril))
    numpyro.factor("scale", log_scale)


# ------------------------------------------------------------------------------------------------
# Bayesian linear regression
# ------------------------------------------------------------------------------------------------


def linear_regression_model(features, targets, prior_scale=1.0, noise_scale=1.0):
    """
    Bayesian linear regression with a Gaussian prior on the weights and known noise scale::

        w ~ N(0, prior_scale^2 I_P)
        targets[n] ~ N(features[n] @ w, noise_scale^2),   n = 1..N   (plate "data")

    Latent site ``"w"`` has event shape ``[P]``; the observed site is ``"targets"``. The log
    normalizer is the log evidence ``log p(targets)``, available in closed form from
    :func:`linear_regression_log_evidence`.

    :param features: design matrix, shape ``[N, P]``.
    :param targets: observed responses, shape ``[N]``; ``None`` to sample them (prior predictive).
    :param float prior_scale: prior standard deviation of each weight.
    :param float noise_scale: observation noise standard deviation.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import (
            linear_regression_log_evidence,
            linear_regression_model,
            make_linear_regression_data,
        )
        features, targets = make_linear_regression_data(0)
        log_z = linear_regression_log_evidence(features, targets)
        mcmc = MCMC(NUTS(linear_regression_model), num_warmup=100, num_samples=100,
                    progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0), features, targets)
    """
    features = jnp.asarray(features)
    num_data, num_features = features.shape
    weights = numpyro.sample("w", dist.Normal(0.0, prior_scale).expand([num_features]).to_event(1))
    with numpyro.plate("data", num_data):
        numpyro.sample("targets", dist.Normal(features @ weights, noise_scale), obs=targets)


def linear_regression_log_evidence(features, targets, prior_scale=1.0, noise_scale=1.0):
    """
    Exact log evidence of :func:`linear_regression_model`.

    Integrating out ``w`` gives ``targets ~ N(0, noise_scale^2 I_N + prior_scale^2 X X^T)`` with
    ``X = features``; its log density at ``targets`` is evaluated in float64 with numpy/scipy
    regardless of the JAX precision setting.

    :param features: design matrix, shape ``[N, P]``.
    :param targets: observed responses, shape ``[N]``.
    :param float prior_scale: prior standard deviation of each weight.
    :param float noise_scale: observation noise standard deviation.
    :return: ``log p(targets)`` as a Python float.
    :rtype: float

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import (
            linear_regression_log_evidence,
            make_linear_regression_data,
        )
        features, targets = make_linear_regression_data(0, num_data=20, num_features=3)
        log_z = linear_regression_log_evidence(features, targets)
    """
    features = np.asarray(features, dtype=np.float64)
    targets = np.asarray(targets, dtype=np.float64)
    num_data = targets.shape[0]
    marginal_covariance = noise_scale**2 * np.eye(num_data) + prior_scale**2 * (
        features @ features.T
    )
    cholesky = scipy.linalg.cholesky(marginal_covariance, lower=True)
    whitened = scipy.linalg.solve_triangular(cholesky, targets, lower=True)
    log_determinant = 2.0 * np.sum(np.log(np.diag(cholesky)))
    return float(
        -0.5 * (whitened @ whitened)
        - 0.5 * log_determinant
        - 0.5 * num_data * math.log(2 * math.pi)
    )


def make_linear_regression_data(
    seed, num_data=50, num_features=5, prior_scale=1.0, noise_scale=1.0
):
    """
    Simulate a data set from :func:`linear_regression_model`.

    Features are i.i.d. standard normal; the true weights are drawn from the prior and the
    targets from the likelihood, using ``numpy.random.default_rng(seed)``.

    :param int seed: seed of the numpy generator.
    :param int num_data: number of observations ``N``.
    :param int num_features: number of features ``P``.
    :param float prior_scale: prior standard deviation of each weight.
    :param float noise_scale: observation noise standard deviation.
    :return: tuple ``(features, targets)`` of float64 numpy arrays with shapes ``[N, P]`` and
        ``[N]``.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import make_linear_regression_data
        features, targets = make_linear_regression_data(0, num_data=10, num_features=2)
        features.shape, targets.shape  # ((10, 2), (10,))
    """
    rng = np.random.default_rng(seed)
    features = rng.standard_normal((num_data, num_features))
    true_weights = prior_scale * rng.standard_normal(num_features)
    targets = features @ true_weights + noise_scale * rng.standard_normal(num_data)
    return features, targets


# ------------------------------------------------------------------------------------------------
# Neal's funnel, centred, with data
# ------------------------------------------------------------------------------------------------

#: Five small observations: they pull the funnel's log variance down into its neck.
FUNNEL_DATA = (0.3, -0.5, 0.1, 0.8, -0.2)


def centred_funnel_model(data):
    """
    Neal's funnel in its centred form, each effect observed once with unit noise::

        v ~ N(0, 3^2),   x_i ~ N(0, e^v),   data_i ~ N(x_i, 1).

    Small data pull ``v`` into the neck, where the scale of ``x`` shrinks by orders of
    magnitude: a fixed step size tuned on the bulk cannot enter it, so samplers and
    annealing paths that rely on one lose mass there without a sign in their own statistics.
    The evidence is a one-dimensional integral (:func:`centred_funnel_log_evidence`).

    :param data: observations, shape ``[N]`` (e.g. :data:`FUNNEL_DATA`).

    **Example:**

    .. code-block:: python

        from numpyro.infer.util import log_density
        from numpyro_extras.targets import FUNNEL_DATA, centred_funnel_model
        # the joint density in the neck: v = -6, every effect 0
        log_joint, _ = log_density(
            centred_funnel_model, (jnp.array(FUNNEL_DATA),), {}, {"v": -6.0, "x": jnp.zeros(5)}
        )
    """
    v = numpyro.sample("v", dist.Normal(0.0, 3.0))
    x = numpyro.sample("x", dist.Normal(0.0, jnp.exp(v / 2)).expand([len(data)]).to_event(1))
    numpyro.sample("y", dist.Normal(x, 1.0).to_event(1), obs=data)


def centred_funnel_log_evidence(data):
    """
    Exact log evidence of :func:`centred_funnel_model`: the effects integrate out in closed
    form (``data_i ~ N(0, e^v + 1)`` given ``v``), leaving
    ``log int N(v; 0, 3^2) prod_i N(data_i; 0, e^v + 1) dv``, done by adaptive quadrature to a
    relative error of 1e-12.

    :param data: observations, shape ``[N]``.
    :return: ``log p(data)`` as a Python float.
    :rtype: float

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import FUNNEL_DATA, centred_funnel_log_evidence
        log_z = centred_funnel_log_evidence(FUNNEL_DATA)  # -6.0827...
    """
    data = np.asarray(data, dtype=np.float64)

    def integrand(v):
        sd = math.sqrt(math.exp(v) + 1.0)
        return scipy.stats.norm.pdf(v, 0.0, 3.0) * np.prod(scipy.stats.norm.pdf(data, 0.0, sd))

    integral, _ = scipy.integrate.quad(integrand, -40.0, 40.0, epsabs=0.0, epsrel=1e-12, limit=500)
    return math.log(integral)
