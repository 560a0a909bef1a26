"""The exact ``log Z`` of the hierarchical radon regression (:func:`radon_model`) by quadrature.

Given its three scales ``s = (sigma_alpha, sigma_beta, epsilon)`` the model is linear and
Gaussian: ``alpha = mu_alpha 1 + sigma_alpha alpha_offset`` has covariance
``1 1^T + sigma_alpha^2 I``, ``beta`` likewise with ``sigma_beta``, and
``log_radon = G [alpha; beta] + epsilon noise`` with ``G`` the county indicators and the two
predictors. So ``p(log_radon | s)`` is a Gaussian density in closed form, and
``log Z = log int p(log_radon | s) p(s) ds`` is a three-dimensional integral, done here by the
trapezoid rule on a grid in ``log s`` (exponentially accurate for a smooth integrand that decays
on the whole line).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp

__all__ = ["radon_conditional_log_likelihood", "radon_log_marginal_likelihood"]

# HalfCauchy scale of the three scales' priors in radon_model.
PRIOR_SCALE = 2.5
# Grid points evaluated at once (memory: a few arrays of points x J x 4 doubles).
CHUNK = 4000


class _RadonDesign:
    """The radon data as a linear model in the standard-normal coefficients
    ``theta = (mu_alpha, alpha_offset, mu_beta, beta_offset)``: ``log_radon = H D theta + noise``
    with ``D = diag(1, sigma_alpha 1_J, 1, sigma_beta 1_2)``. ``H^T H``, ``H^T y`` and ``y^T y``
    are shared by every grid point."""

    def __init__(self, floor, log_uranium, county, num_counties, log_radon):
        log_radon = np.asarray(log_radon, dtype=np.float64)
        county = np.asarray(county)
        num_households = log_radon.size
        predictors = np.stack(
            [np.asarray(floor, dtype=np.float64), np.asarray(log_uranium, dtype=np.float64)], 1
        )
        indicators = np.zeros((num_households, num_counties))
        indicators[np.arange(num_households), county] = 1.0
        design = np.concatenate(
            [
                np.ones((num_households, 1)),
                indicators,
                predictors.sum(1, keepdims=True),
                predictors,
            ],
            1,
        )
        self.num_counties = num_counties
        self.num_households = num_households
        gram = design.T @ design
        projected = design.T @ log_radon
        counties = np.arange(1, num_counties + 1)
        others = np.array([0, num_counties + 1, num_counties + 2, num_counties + 3])
        self.counts = np.diag(gram)[counties]
        self.county_other_gram = gram[np.ix_(counties, others)]
        self.other_gram = gram[np.ix_(others, others)]
        self.county_projected = projected[counties]
        self.other_projected = projected[others]
        self.squared_norm = float(log_radon @ log_radon)

    def conditional_log_likelihood(self, sigma_alpha, sigma_beta, epsilon):
        """``log p(log_radon | scales)`` for arrays of scales: ``y ~ N(0, H D D H^T + eps^2 I)``,
        by the Woodbury identity and the matrix determinant lemma on the ``J + 4`` standard-normal
        coefficients (whose posterior precision ``P = I + D H^T H D / eps^2`` is well conditioned
        for any scales) instead of the ``N`` data. Each household is in one county, so ``P``'s
        county block is diagonal: it is eliminated in closed form, leaving a 4 x 4 Schur
        complement per point."""
        noise_variance = epsilon**2
        county_scale = sigma_alpha / noise_variance
        # The four other coefficients (mu_alpha, mu_beta and the two beta offsets), scaled.
        other_scaling = np.stack(
            [np.ones_like(sigma_alpha), np.ones_like(sigma_alpha), sigma_beta, sigma_beta], -1
        )
        county_diagonal = 1.0 + sigma_alpha[:, None] * county_scale[:, None] * self.counts
        coupling = county_scale[:, None, None] * self.county_other_gram * other_scaling[:, None, :]
        other_block = (
            np.eye(4)
            + (other_scaling[:, :, None] * self.other_gram * other_scaling[:, None, :])
            / noise_variance[:, None, None]
        )
        county_projected = county_scale[:, None] * self.county_projected
        other_projected = other_scaling * self.other_projected / noise_variance[:, None]
        # Schur complement S = C - B^T A^-1 B and the right-hand side b_O - B^T A^-1 b_A.
        weighted = coupling / county_diagonal[:, :, None]
        schur = other_block - np.einsum("pjk,pjl->pkl", weighted, coupling)
        reduced = other_projected - np.einsum("pjk,pj->pk", weighted, county_projected)
        cholesky = np.linalg.cholesky(schur)
        whitened = np.linalg.solve(cholesky, reduced[..., None])[..., 0]
        explained = np.sum(county_projected**2 / county_diagonal, -1) + np.sum(whitened**2, -1)
        quadratic = self.squared_norm / noise_variance - explained
        log_det = (
            self.num_households * np.log(noise_variance)
            + np.sum(np.log(county_diagonal), -1)
            + 2 * np.sum(np.log(np.diagonal(cholesky, axis1=1, axis2=2)), -1)
        )
        return -0.5 * (self.num_households * np.log(2 * np.pi) + log_det + quadratic)

    def log_integrand(self, log_scales):
        """``log p(log_radon | s) + log p(s) + sum(log s)`` at rows of ``log s`` (the last term
        the Jacobian of integrating over ``log s``)."""
        scales = np.exp(log_scales)
        log_prior = np.log(2 / (np.pi * PRIOR_SCALE)) - np.log1p((scales / PRIOR_SCALE) ** 2)
        values = [
            self.conditional_log_likelihood(*chunk.T)
            for chunk in np.array_split(scales, max(1, -(-len(scales) // CHUNK)))
        ]
        return np.concatenate(values) + np.sum(log_prior + log_scales, -1)


def radon_conditional_log_likelihood(
    floor, log_uranium, county, num_counties, log_radon, *, sigma_alpha, sigma_beta, epsilon
):
    """``log p(log_radon | sigma_alpha, sigma_beta, epsilon)`` of :func:`radon_model`, the
    offsets and group means integrated out in closed form.

    :param floor: floor indicator per household, shape ``[N]``.
    :param log_uranium: county log uranium per household, shape ``[N]``.
    :param county: 0-based county index per household, shape ``[N]``.
    :param int num_counties: number of counties ``J``.
    :param log_radon: observed log radon, shape ``[N]``.
    :param sigma_alpha: county scale(s), a float or an array.
    :param sigma_beta: slope scale(s), broadcast with ``sigma_alpha``.
    :param epsilon: noise scale(s), broadcast with ``sigma_alpha``.
    :return: NumPy array of log likelihoods, the broadcast shape of the scales.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import load_radon, radon_conditional_log_likelihood
        radon_conditional_log_likelihood(
            **load_radon(), sigma_alpha=0.3, sigma_beta=0.2, epsilon=0.75
        )  # about -1047.76
    """
    design = _RadonDesign(floor, log_uranium, county, num_counties, log_radon)
    scales = np.broadcast_arrays(
        *(np.asarray(s, dtype=np.float64) for s in (sigma_alpha, sigma_beta, epsilon))
    )
    flat = [s.ravel() for s in scales]
    return design.conditional_log_likelihood(*flat).reshape(scales[0].shape)


def radon_log_marginal_likelihood(
    floor,
    log_uranium,
    county,
    num_counties,
    log_radon,
    *,
    spacing=(0.2, 0.4, 0.02),
    drop=45.0,
    range_factor=1.0,
):
    """The exact ``log Z = log p(log_radon)`` of :func:`radon_model` by quadrature.

    ``p(log_radon | s)`` (:func:`radon_conditional_log_likelihood`) times the HalfCauchy(2.5)
    priors of ``s = (sigma_alpha, sigma_beta, epsilon)`` is integrated over ``log s`` by the
    trapezoid rule on a grid of the given ``spacing``. Along each axis through the integrand's
    maximum the grid reaches where the log integrand has fallen ``drop`` nats below it
    (``range_factor`` widens that box about its centre); the largest value on the grid's faces
    must stay 20 nats below the maximum, or it raises. The posterior standard deviations of the
    three log scales are about 0.29, 0.63 and 0.024 on the bundled data (``J = 85``,
    ``N = 919``), so the default spacing is under one of them per step; the default grid
    (about 110,000 points) agrees to 1e-5 nats with the grids shifted by half a
    step and with a grid of half its spacing.

    :param floor: floor indicator per household, shape ``[N]``.
    :param log_uranium: county log uranium per household, shape ``[N]``.
    :param county: 0-based county index per household, shape ``[N]``.
    :param int num_counties: number of counties ``J``.
    :param log_radon: observed log radon, shape ``[N]``.
    :param spacing: grid spacing in ``(log sigma_alpha, log sigma_beta, log epsilon)``.
    :param float drop: nats below the maximum at which each axis of the grid ends.
    :param float range_factor: widening of the grid box about its centre.
    :return: ``log Z`` (float).
    :raises RuntimeError: when the grid's faces carry non-negligible mass.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import load_radon, radon_log_marginal_likelihood
        radon_log_marginal_likelihood(**load_radon())  # -1043.6029
    """
    design = _RadonDesign(floor, log_uranium, county, num_counties, log_radon)

    def negative(log_scales):
        return -design.log_integrand(np.asarray(log_scales)[None])[0]

    mode = minimize(
        negative,
        np.log([0.3, 0.3, 1.0]),
        method="Nelder-Mead",
        options=dict(xatol=1e-8, fatol=1e-10, maxiter=5000),
    ).x
    peak = -negative(mode)
    axes = []
    for axis, step in enumerate(spacing):
        ends = []
        for direction in (-1.0, 1.0):
            # Walk out from the maximum until the integrand has dropped by `drop` nats.
            offset = 0.0
            while True:
                point = mode.copy()
                point[axis] += direction * offset
                if peak + negative(point) > drop:
                    break
                offset += step
            ends.append(mode[axis] + direction * offset)
        centre, half_width = 0.5 * (ends[0] + ends[1]), 0.5 * (ends[1] - ends[0]) * range_factor
        axes.append(np.arange(centre - half_width, centre + half_width + step / 2, step))
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
    values = design.log_integrand(grid).reshape([len(axis) for axis in axes])
    faces = max(np.max(np.take(values, [0, -1], axis=axis)) for axis in range(3))
    if faces > values.max() - 20.0:
        raise RuntimeError(
            f"radon_log_marginal_likelihood: the grid's faces are only {values.max() - faces:.1f} "
            "nats below the maximum; raise drop or range_factor."
        )
    return float(logsumexp(values) + np.sum(np.log(spacing)))
