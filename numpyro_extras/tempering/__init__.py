"""Continuous tempering (Graham & Storkey): joint and Gibbs kernels, base fit, log Z estimators."""

from numpyro_extras.model.bases import (
    BaseCoverageWarning,
    GaussianBase,
    MixtureBase,
    ModeSearchWarning,
)
from numpyro_extras.tempering.base_check import BaseMomentCheck, base_moment_check, refit_base
from numpyro_extras.tempering.base_fit import fit_base
from numpyro_extras.tempering.chains import extended_potential, tempered_potential
from numpyro_extras.tempering.diagnostics import (
    TemperingDiagnostics,
    log_marginal_likelihood,
    tempering_diagnostics,
)
from numpyro_extras.tempering.evidence import target_log_weights, tempering_log_normalizer
from numpyro_extras.tempering.kernels import (
    GibbsContinuousTempering,
    JointContinuousTempering,
    TemperingState,
)
from numpyro_extras.tempering.plots import plot_tempering
from numpyro_extras.tempering.posterior import (
    posterior_samples,
    tempered_samples,
    to_inference_data,
)
from numpyro_extras.tempering.weights import (
    log_base_weight,
    log_target_weight,
    sample_inverse_temperature,
)

__all__ = [
    "BaseCoverageWarning",
    "BaseMomentCheck",
    "GaussianBase",
    "MixtureBase",
    "ModeSearchWarning",
    "GibbsContinuousTempering",
    "JointContinuousTempering",
    "TemperingState",
    "base_moment_check",
    "extended_potential",
    "tempered_potential",
    "fit_base",
    "log_base_weight",
    "log_marginal_likelihood",
    "log_target_weight",
    "plot_tempering",
    "posterior_samples",
    "refit_base",
    "sample_inverse_temperature",
    "target_log_weights",
    "tempered_samples",
    "TemperingDiagnostics",
    "tempering_diagnostics",
    "tempering_log_normalizer",
    "to_inference_data",
]
