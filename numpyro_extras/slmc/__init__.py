"""VAE self-learning Monte Carlo (Ichikawa et al., "Toward unlimited self-learning MCMC with
parallel adaptive annealing"): a VAE trained along an annealing path proposes independent draws,
accepted exactly on the extended space ``(x, z)``, and the proposals' importance weights give
``log Z``."""

from numpyro_extras.slmc.annealing import (
    AnnealingHistory,
    AnnealingRung,
    AnnealingSettings,
    AnnealingStalledWarning,
    fit_vae_proposal,
)
from numpyro_extras.slmc.evidence import slmc_inference_data, slmc_log_marginal_likelihood
from numpyro_extras.slmc.io import load_proposal, save_proposal
from numpyro_extras.slmc.kernels import VAESLMC, IsometryWarning, SLMCState
from numpyro_extras.slmc.plots import plot_annealing
from numpyro_extras.slmc.vae import VAEConfig, VAEProposal, isometry_factors

__all__ = [
    "AnnealingHistory",
    "AnnealingRung",
    "AnnealingSettings",
    "AnnealingStalledWarning",
    "IsometryWarning",
    "SLMCState",
    "VAEConfig",
    "VAEProposal",
    "VAESLMC",
    "fit_vae_proposal",
    "isometry_factors",
    "load_proposal",
    "plot_annealing",
    "save_proposal",
    "slmc_inference_data",
    "slmc_log_marginal_likelihood",
]
