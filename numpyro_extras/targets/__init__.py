r"""Built-in NumPyro models whose log normalizer is known, for tests, benchmarks and demos.

Throughout this package the *log normalizer* of a model means

.. math::

    \log Z = \log \int \exp(-\phi(x))\, dx,

where :math:`\phi` is the potential energy NumPyro computes for the model on the unconstrained
space (so it includes all transform Jacobians) and the integral runs over that whole space. For a
model with observations this is the log marginal likelihood :math:`\log p(y)`. It is the quantity
the tempering samplers of :mod:`numpyro_extras` estimate.

One module per family of targets; every public name is also available from this package:

* :mod:`~numpyro_extras.targets.gaussian` -- the one-dimensional bimodal toy of Sec. 7.1 of the
  continuous tempering paper (Graham & Storkey, 2017) and a multivariate normal, both with
  :math:`\log Z` chosen by the caller, Bayesian linear regression with its closed-form
  evidence, and Neal's funnel (centred) with data, its evidence by quadrature.
* :mod:`~numpyro_extras.targets.boltzmann_relaxation` -- the Gaussian-mixture relaxation of a
  Boltzmann machine (Sec. 7.2 and App. B of the paper) with exact :math:`\log Z`, mean and
  covariance obtained by enumerating all Boltzmann machine states.
* :mod:`~numpyro_extras.targets.data` -- targets on the bundled real data: the hierarchical radon
  regression of Sec. 7.3 and logistic regression on the German credit data (no exact
  :math:`\log Z`).
* :mod:`~numpyro_extras.targets.radon_evidence` -- the radon regression's exact :math:`\log Z`
  by quadrature over its three scales (the rest of the model is linear and Gaussian).
* :mod:`~numpyro_extras.targets.grid` -- the ACS paper's synthetic two-dimensional multimodal
  distribution over ordinal integers (its Sec. 4.1 and Table 3), with its exact distribution by
  enumeration.
* :mod:`~numpyro_extras.targets.planar` -- two-dimensional potentials with exact mode weights
  (the Ai-sampler paper's mixtures and rings, and an uneven mixture of three).
* :mod:`~numpyro_extras.targets.multimodal` -- multimodal families with exact :math:`\log Z` and
  exact mode weights (:class:`MultimodalTarget`): separated Gaussian mixtures, products of
  sign-ambiguous parameters and Boltzmann machine relaxations read by orthant.
"""

from numpyro_extras.targets.boltzmann_relaxation import (
    BoltzmannRelaxation,
    boltzmann_relaxation_model,
    boltzmann_relaxation_potential,
    boltzmann_states,
    enumerate_boltzmann_machine,
    make_boltzmann_relaxation,
)
from numpyro_extras.targets.data import (
    GERMAN_CREDIT_NUM_PREDICTORS,
    LOGISTIC_REGRESSION_DATASETS,
    load_german_credit,
    load_logistic_regression_data,
    load_radon,
    logistic_regression_model,
    radon_model,
)
from numpyro_extras.targets.gaussian import (
    BIMODAL_LOCS,
    BIMODAL_SCALES,
    BIMODAL_WEIGHTS,
    FUNNEL_DATA,
    bimodal_mode_weights,
    bimodal_model,
    centred_funnel_log_evidence,
    centred_funnel_model,
    gaussian_model,
    linear_regression_log_evidence,
    linear_regression_model,
    make_linear_regression_data,
)
from numpyro_extras.targets.grid import (
    MULTIMODAL_LAYOUTS,
    MultimodalGrid,
    make_multimodal_grid,
    multimodal_grid_log_density,
    multimodal_grid_model,
    multimodal_grid_nearest_mode,
    multimodal_grid_probabilities,
)
from numpyro_extras.targets.multimodal import (
    MultimodalTarget,
    boltzmann_orthant_weights,
    boltzmann_target,
    gaussian_mixture_model,
    gaussian_mixture_target,
    mode_weight_error,
    sign_product_model,
    sign_product_target,
)
from numpyro_extras.targets.planar import PLANAR_TARGETS, PlanarTarget, planar_target
from numpyro_extras.targets.radon_evidence import (
    radon_conditional_log_likelihood,
    radon_log_marginal_likelihood,
)

__all__ = [
    # gaussian
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
    # boltzmann_relaxation
    "BoltzmannRelaxation",
    "boltzmann_relaxation_model",
    "boltzmann_relaxation_potential",
    "boltzmann_states",
    "enumerate_boltzmann_machine",
    "make_boltzmann_relaxation",
    # data
    "GERMAN_CREDIT_NUM_PREDICTORS",
    "load_german_credit",
    "LOGISTIC_REGRESSION_DATASETS",
    "load_logistic_regression_data",
    "load_radon",
    "logistic_regression_model",
    "radon_conditional_log_likelihood",
    "radon_log_marginal_likelihood",
    "radon_model",
    # grid
    "MULTIMODAL_LAYOUTS",
    "MultimodalGrid",
    "make_multimodal_grid",
    "multimodal_grid_log_density",
    "multimodal_grid_model",
    "multimodal_grid_nearest_mode",
    "multimodal_grid_probabilities",
    # multimodal
    "MultimodalTarget",
    "boltzmann_orthant_weights",
    "boltzmann_target",
    "gaussian_mixture_model",
    "gaussian_mixture_target",
    "mode_weight_error",
    "sign_product_model",
    "sign_product_target",
    # planar
    "PLANAR_TARGETS",
    "PlanarTarget",
    "planar_target",
]
