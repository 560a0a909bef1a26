"""The Ai-sampler (Egorov, Valperga and Gavves): a Metropolis-Hastings kernel whose proposal is a
learned involution, exact for any network parameters, trained adversarially from samples alone."""

from numpyro_extras.involutive.chains import InvolutiveInfo, InvolutiveState
from numpyro_extras.involutive.diagnostics import (
    InvolutionCheck,
    involution_check,
    mode_switch_rate,
    plot_ai_sampler,
)
from numpyro_extras.involutive.io import load_involution, save_involution
from numpyro_extras.involutive.kernels import AiSampler, AiState, ai_init, ai_step
from numpyro_extras.involutive.networks import (
    InvolutionConfig,
    InvolutiveProposal,
    init_proposal,
    involution,
)
from numpyro_extras.involutive.training import TrainingHistory, TrainingSettings, train_ai_sampler

__all__ = [
    "AiSampler",
    "AiState",
    "InvolutionCheck",
    "InvolutionConfig",
    "InvolutiveInfo",
    "InvolutiveProposal",
    "InvolutiveState",
    "TrainingHistory",
    "TrainingSettings",
    "ai_init",
    "ai_step",
    "init_proposal",
    "involution",
    "involution_check",
    "load_involution",
    "mode_switch_rate",
    "plot_ai_sampler",
    "save_involution",
    "train_ai_sampler",
]
