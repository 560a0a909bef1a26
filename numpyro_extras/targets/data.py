"""Targets on real data sets bundled with the package (in ``data_files/``): the hierarchical
radon regression of the continuous tempering paper (Sec. 7.3) and Bayesian logistic regression on
the German credit data. Neither has a closed-form ``log Z``; the radon model's is a
three-dimensional integral done by quadrature in :mod:`numpyro_extras.targets.radon_evidence`.
"""

import json
from importlib import resources

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = [
    "GERMAN_CREDIT_NUM_PREDICTORS",
    "load_german_credit",
    "LOGISTIC_REGRESSION_DATASETS",
    "load_logistic_regression_data",
    "load_radon",
    "logistic_regression_model",
    "radon_model",
]


def _data_file(name):
    """The bundled data file ``name``, read through importlib.resources so that it is found in an
    installed wheel or zip as well as in a source checkout."""
    return resources.files("numpyro_extras.targets") / "data_files" / name


# ------------------------------------------------------------------------------------------------
# Hierarchical radon regression (paper Sec. 7.3, Fig. 3)
# ------------------------------------------------------------------------------------------------


def load_radon():
    """
    Minnesota radon data (Gelman & Hill, 2007, ch. 12) bundled with the package: 919 households
    in 85 counties.

    :return: dict with numpy arrays ``"floor"`` (float64 ``[919]``, 1 if measured on the first
        floor, 0 in the basement), ``"log_uranium"`` (float64 ``[919]``, county-level log uranium
        of each household's county), ``"county"`` (int64 ``[919]``, **0-based** county index),
        ``"log_radon"`` (float64 ``[919]``) and the int ``"num_counties"`` (85). The keys match
        the arguments of :func:`radon_model`.
    :rtype: dict

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import load_radon
        data = load_radon()
        int(data["county"].min()), data["num_counties"]  # (0, 85)
    """
    raw = json.loads(_data_file("radon_mn.json").read_text())
    return {
        "floor": np.asarray(raw["floor_measure"], dtype=np.float64),
        "log_uranium": np.asarray(raw["log_uppm"], dtype=np.float64),
        # The file follows Stan's 1-based convention.
        "county": np.asarray(raw["county_idx"], dtype=np.int64) - 1,
        "log_radon": np.asarray(raw["log_radon"], dtype=np.float64),
        "num_counties": int(raw["J"]),
    }


def radon_model(floor, log_uranium, county, num_counties, log_radon=None):
    """
    Hierarchical regression of household log radon (continuous tempering paper, Sec. 7.3,
    Fig. 3a), in the non-centred form of the paper's code::

        mu_alpha, mu_beta ~ N(0, 1)
        sigma_alpha, sigma_beta, epsilon ~ HalfCauchy(2.5)
        alpha = mu_alpha + sigma_alpha * alpha_offset,   alpha_offset ~ N(0, I_J)
        beta = mu_beta + sigma_beta * beta_offset,       beta_offset ~ N(0, I_2)
        log_radon[i] ~ N(alpha[county[i]] + beta[0] floor[i] + beta[1] log_uranium[i], epsilon^2)

    All scales are standard deviations, as in the paper's code: Fig. 3a's ``N(mu, sigma)`` takes a
    variance, but its factors pass ``epsilon^2`` and ``sigma_alpha^2 I``. With the bundled data
    (``J = 85``)
    there are 5 + 85 + 2 = 92 unconstrained dimensions; the scales live on the log scale with
    their Jacobians in the potential. The centred and non-centred forms have the same
    normalizer ``p(log_radon)``, which has no closed form; :func:`radon_log_marginal_likelihood`
    computes it by quadrature over the three scales. ``alpha`` and ``beta`` are recorded as
    deterministic sites.

    :param floor: floor indicator per household, shape ``[N]``.
    :param log_uranium: county log uranium per household, shape ``[N]``.
    :param county: 0-based county index per household, shape ``[N]``.
    :param int num_counties: number of counties ``J`` (static).
    :param log_radon: observed log radon, shape ``[N]``; ``None`` to sample it.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import load_radon, radon_model
        mcmc = MCMC(NUTS(radon_model), num_warmup=200, num_samples=200, progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0), **load_radon())
    """
    floor = jnp.asarray(floor)
    log_uranium = jnp.asarray(log_uranium)
    county = jnp.asarray(county)
    mu_alpha = numpyro.sample("mu_alpha", dist.Normal(0.0, 1.0))
    mu_beta = numpyro.sample("mu_beta", dist.Normal(0.0, 1.0))
    sigma_alpha = numpyro.sample("sigma_alpha", dist.HalfCauchy(2.5))
    sigma_beta = numpyro.sample("sigma_beta", dist.HalfCauchy(2.5))
    epsilon = numpyro.sample("epsilon", dist.HalfCauchy(2.5))
    alpha_offset = numpyro.sample(
        "alpha_offset", dist.Normal(0.0, 1.0).expand([num_counties]).to_event(1)
    )
    beta_offset = numpyro.sample("beta_offset", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    alpha = numpyro.deterministic("alpha", mu_alpha + sigma_alpha * alpha_offset)
    beta = numpyro.deterministic("beta", mu_beta + sigma_beta * beta_offset)
    predicted = alpha[county] + beta[0] * floor + beta[1] * log_uranium
    with numpyro.plate("data", county.shape[0]):
        numpyro.sample("log_radon", dist.Normal(predicted, epsilon), obs=log_radon)


# ------------------------------------------------------------------------------------------------
# Bayesian logistic regression on the German credit data
# ------------------------------------------------------------------------------------------------

#: Number of predictors of the German credit data (the columns of ``german.csv`` before the label).
GERMAN_CREDIT_NUM_PREDICTORS = 24


def load_german_credit(num_predictors=None):
    """
    The German credit data (Statlog, UCI; the numeric version with 24 predictors) bundled with the
    package: 1000 loan applicants, label 1 for a bad credit risk (300 of them).

    Each predictor is standardised to mean 0 and standard deviation 1 (over the 1000 rows, with
    ``ddof=0``) and a column of ones is prepended as the intercept, as in the usual Bayesian
    logistic regression benchmark of this data.

    :param int num_predictors: keep the first ``num_predictors`` predictors (1 to 24); ``None``
        keeps all 24.
    :return: tuple ``(features, labels)``: float64 numpy arrays of shapes
        ``[1000, num_predictors + 1]`` (intercept first) and ``[1000]`` with values in {0, 1};
        the arguments of :func:`logistic_regression_model`.
    :raises ValueError: for a ``num_predictors`` outside 1..24 or not an integer.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import load_german_credit
        features, labels = load_german_credit(num_predictors=8)
        features.shape, labels.shape  # ((1000, 9), (1000,))
    """
    if num_predictors is None:
        num_predictors = GERMAN_CREDIT_NUM_PREDICTORS
    if (
        isinstance(num_predictors, bool)
        or not isinstance(num_predictors, (int, np.integer))
        or not 1 <= num_predictors <= GERMAN_CREDIT_NUM_PREDICTORS
    ):
        raise ValueError(
            f"num_predictors must be an integer from 1 to {GERMAN_CREDIT_NUM_PREDICTORS} (or "
            f"None for all), got {num_predictors!r}."
        )
    return _standardized_with_intercept("german", int(num_predictors))


# The Statlog (UCI) binary classification sets of the Bayesian logistic regression benchmarks
# (A-NICE-MC, the Ai-sampler paper), bundled with the package: rows and predictors.
LOGISTIC_REGRESSION_DATASETS = {"heart": (270, 13), "australian": (690, 14), "german": (1000, 24)}


def _standardized_with_intercept(name, num_predictors=None):
    with _data_file(f"{name}.csv").open("r") as handle:
        table = np.loadtxt(handle, delimiter=",", skiprows=1, dtype=np.float64)
    predictors = table[:, :-1] if num_predictors is None else table[:, :num_predictors]
    predictors = (predictors - predictors.mean(axis=0)) / predictors.std(axis=0)
    features = np.concatenate([np.ones((table.shape[0], 1)), predictors], axis=1)
    return features, table[:, -1].copy()


def load_logistic_regression_data(name):
    """
    One of the Statlog logistic-regression data sets bundled with the package (``"heart"``,
    ``"australian"`` or ``"german"``; see :data:`LOGISTIC_REGRESSION_DATASETS`), every predictor
    standardised to mean 0 and standard deviation 1 over all rows and an intercept column
    prepended, as :func:`load_german_credit` does.

    :param str name: the data set.
    :return: ``(features, labels)``, float64 arrays ``[N, P + 1]`` and ``[N]`` (labels in {0, 1}),
        the arguments of :func:`logistic_regression_model`.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import load_logistic_regression_data
        features, labels = load_logistic_regression_data("heart")
        features.shape  # (270, 14)
    """
    if name not in LOGISTIC_REGRESSION_DATASETS:
        raise ValueError(
            f"name must be one of {sorted(LOGISTIC_REGRESSION_DATASETS)}, got {name!r}."
        )
    return _standardized_with_intercept(name)


def logistic_regression_model(features, labels=None):
    """
    Bayesian logistic regression with standard normal priors on every coefficient::

        w ~ N(0, I_P)                          (the intercept, if features has one, included)
        labels[n] ~ Bernoulli(logits = features[n] @ w),   n = 1..N   (plate "data")

    Latent site ``"w"`` has event shape ``[P]``; the observed site is ``"labels"``. With
    :func:`load_german_credit` ``P`` is 25 (24 predictors and the intercept). The log evidence has
    no closed form; ``benchmarks/german_credit_benchmark.py`` computes a reference by importance
    sampling from a Student-t fitted at the mode.

    :param features: design matrix, shape ``[N, P]``.
    :param labels: observed labels in {0, 1}, shape ``[N]``; ``None`` to sample them.

    **Example:**

    .. code-block:: python

        from numpyro_extras.targets import load_german_credit, logistic_regression_model
        features, labels = load_german_credit(num_predictors=8)
        evidence = nx.ais(jax.random.PRNGKey(0), logistic_regression_model,
                          (features, labels), num_particles=100, num_temperatures=50,
                          progress_bar=False)
    """
    features = jnp.asarray(features)
    num_data, num_features = features.shape
    weights = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([num_features]).to_event(1))
    with numpyro.plate("data", num_data):
        numpyro.sample("labels", dist.Bernoulli(logits=features @ weights), obs=labels)
