"""The exact conditional of the inverse temperature and the Rao-Blackwellised weights.

With ``Delta(x) = phi(x) + log zeta - psi(x)`` (Graham & Storkey, target ``exp(-phi) / Z``,
normalised base ``exp(-psi)``), the inverse temperature given ``x`` is an exponential with rate
``Delta`` truncated to [0, 1] (paper eq. 17), and every draw, whatever its temperature, carries
the weights ``w1 = p(beta=1 | x)`` and ``w0 = p(beta=0 | x)`` of eqs. 20-22.
Everything here works in log space, so it stays finite for ``|Delta|`` in the thousands.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = [
    "log_expm1_ratio",
    "log_target_weight",
    "log_base_weight",
    "sample_inverse_temperature",
    "inverse_temperature_log_density",
]

# Below this |Delta| the series of log((e^Delta - 1) / Delta) is exact to double precision.
_SERIES_THRESHOLD = 1e-4


def log_expm1_ratio(delta):
    """``log((exp(delta) - 1) / delta)``, finite for every real ``delta`` (0 at ``delta = 0``).

    :param delta: array of ``Delta`` values.
    :return: array of the same shape.
    """
    delta = jnp.asarray(delta)
    magnitude = jnp.abs(delta)
    # Keep the discarded jnp.where branch finite so gradients do not turn into NaN.
    safe_magnitude = jnp.where(magnitude < _SERIES_THRESHOLD, 1.0, magnitude)
    # log((1 - e^{-a}) / a), the same function of a = |delta| for either sign
    log_one_sided = jnp.log(-jnp.expm1(-safe_magnitude)) - jnp.log(safe_magnitude)
    general = jnp.where(delta > 0, delta + log_one_sided, log_one_sided)
    series = delta / 2 + delta**2 / 24
    return jnp.where(magnitude < _SERIES_THRESHOLD, series, general)


def log_target_weight(delta):
    """``log w1 = log p(beta = 1 | x) = log(Delta / (exp(Delta) - 1))`` (paper eq. 20).

    :param delta: array of ``Delta(x)`` values.
    :return: array of log weights; ``w1 <= 1 + max(0, -Delta)``.

    **Example:**

    .. code-block:: python

        log_target_weight(0.0)  # 0.0: at Delta = 0 the temperature is uniform
    """
    return -log_expm1_ratio(delta)


def log_base_weight(delta):
    """``log w0 = log p(beta = 0 | x) = log(Delta / (1 - exp(-Delta)))`` (paper eq. 20).

    :param delta: array of ``Delta(x)`` values.
    :return: array of log weights; ``w0(Delta) = w1(-Delta)``.
    """
    return -log_expm1_ratio(-jnp.asarray(delta))


def inverse_temperature_log_density(beta, delta):
    """Log density of ``beta | x`` on [0, 1] (paper eq. 17).

    ``log p(beta | x) = log(Delta exp(-beta Delta) / (1 - exp(-Delta)))``.

    :param beta: inverse temperatures in [0, 1].
    :param delta: ``Delta(x)``.
    :return: the log density.
    """
    return -beta * delta + log_base_weight(delta)


def sample_inverse_temperature(rng_key, delta):
    """Draw ``beta | x`` exactly from the exponential with rate ``Delta`` truncated to [0, 1].

    Inverse-CDF draw of eq. 17: for ``a = |Delta|``, ``t = -log1p(U expm1(-a)) / a`` has the
    truncated exponential law of rate ``a``; ``beta = t`` for ``Delta > 0`` and ``1 - t`` otherwise.
    Stable for ``|Delta|`` from 0 to well beyond 1e4.

    :param jax.random.PRNGKey rng_key: random key.
    :param delta: ``Delta(x)``, any shape.
    :return: inverse temperatures of the shape of ``delta``.

    **Example:**

    .. code-block:: python

        beta = sample_inverse_temperature(jax.random.PRNGKey(0), jnp.array([-5.0, 0.0, 500.0]))
    """
    delta = jnp.asarray(delta)
    uniform = jax.random.uniform(rng_key, delta.shape, dtype=jnp.result_type(delta, float))
    magnitude = jnp.abs(delta)
    tiny = magnitude < 1e-12
    safe_magnitude = jnp.where(tiny, 1.0, magnitude)
    distance_from_end = -jnp.log1p(uniform * jnp.expm1(-safe_magnitude)) / safe_magnitude
    distance_from_end = jnp.clip(jnp.where(tiny, uniform, distance_from_end), 0.0, 1.0)
    return jnp.where(delta >= 0, distance_from_end, 1.0 - distance_from_end)
