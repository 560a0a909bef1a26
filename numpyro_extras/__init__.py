"""numpyro-extras: samplers NumPyro lacks, for any NumPyro model.

Continuous tempering kernels that cross between isolated modes and estimate the log marginal
likelihood as they go; more method families follow the same pattern (a functional core under a
thin :class:`~numpyro.infer.mcmc.MCMCKernel`).
"""

from numpyro_extras import targets as targets  # nx.targets: the built-in test models
from numpyro_extras.annealing.batched import batched_ais
from numpyro_extras.annealing.boltzmann import (
    BipartiteBoltzmann,
    checkerboard_sites,
    ising_lattice,
    random_rbm,
    rbm,
)
from numpyro_extras.annealing.boltzmann_models import ising_model, rbm_model
from numpyro_extras.annealing.mais import (
    BoltzmannComparison,
    ais_boltzmann,
    mais_vs_ais,
    marginalized_ais_boltzmann,
)
from numpyro_extras.annealing.model_annealing import ais
from numpyro_extras.bridge import bridge_evidence, bridge_sampling
from numpyro_extras.compare import compare, plot_compare
from numpyro_extras.discrete import (
    ACS,
    DMALA,
    ACSState,
    CyclicalSchedule,
    DiscreteVariable,
    OneHotCategorical,
    TuningSettings,
)
from numpyro_extras.estimates import log_marginal_likelihood, to_inference_data
from numpyro_extras.exchange import ReplicaExchange, plot_exchange
from numpyro_extras.exchange.diagnostics import ExchangeDiagnostics, exchange_diagnostics
from numpyro_extras.involutive import (
    AiSampler,
    AiState,
    InvolutionCheck,
    InvolutiveProposal,
    involution_check,
    load_involution,
    mode_switch_rate,
    plot_ai_sampler,
    save_involution,
    train_ai_sampler,
)
from numpyro_extras.model.potential import FlatModel, flatten_model
from numpyro_extras.results.evidence import Evidence
from numpyro_extras.slmc import (
    VAESLMC,
    AnnealingHistory,
    AnnealingSettings,
    AnnealingStalledWarning,
    IsometryWarning,
    SLMCState,
    VAEProposal,
    fit_vae_proposal,
    isometry_factors,
    load_proposal,
    plot_annealing,
    save_proposal,
)
from numpyro_extras.tempering import (
    BaseCoverageWarning,
    BaseMomentCheck,
    GaussianBase,
    GibbsContinuousTempering,
    JointContinuousTempering,
    MixtureBase,
    ModeSearchWarning,
    TemperingDiagnostics,
    TemperingState,
    base_moment_check,
    extended_potential,
    fit_base,
    plot_tempering,
    posterior_samples,
    refit_base,
    target_log_weights,
    tempered_potential,
    tempered_samples,
    tempering_diagnostics,
    tempering_log_normalizer,
)

__version__ = "0.1.0"

__all__ = [
    "AiSampler",
    "AiState",
    "InvolutionCheck",
    "InvolutiveProposal",
    "involution_check",
    "load_involution",
    "mode_switch_rate",
    "plot_ai_sampler",
    "save_involution",
    "train_ai_sampler",
    "ACS",
    "ACSState",
    "CyclicalSchedule",
    "DMALA",
    "DiscreteVariable",
    "OneHotCategorical",
    "TuningSettings",
    "ais",
    "batched_ais",
    "BipartiteBoltzmann",
    "BoltzmannComparison",
    "ais_boltzmann",
    "mais_vs_ais",
    "marginalized_ais_boltzmann",
    "checkerboard_sites",
    "ising_lattice",
    "ising_model",
    "random_rbm",
    "rbm",
    "rbm_model",
    "BaseCoverageWarning",
    "BaseMomentCheck",
    "bridge_evidence",
    "bridge_sampling",
    "Evidence",
    "ExchangeDiagnostics",
    "ReplicaExchange",
    "exchange_diagnostics",
    "FlatModel",
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
    "flatten_model",
    "log_marginal_likelihood",
    "compare",
    "plot_compare",
    "plot_exchange",
    "plot_tempering",
    "posterior_samples",
    "refit_base",
    "target_log_weights",
    "tempered_samples",
    "TemperingDiagnostics",
    "tempering_diagnostics",
    "tempering_log_normalizer",
    "to_inference_data",
    "AnnealingHistory",
    "AnnealingSettings",
    "AnnealingStalledWarning",
    "IsometryWarning",
    "SLMCState",
    "VAEProposal",
    "VAESLMC",
    "fit_vae_proposal",
    "isometry_factors",
    "load_proposal",
    "plot_annealing",
    "save_proposal",
]
