"""Gradient-based sampling of discrete latents: the Automatic Cyclical Sampler (ACS).

Pynadath et al., "Gradient-based discrete sampling with automatic cyclical scheduling" (2024).
The functional core is pure JAX: the proposal and MH test (:mod:`.proposal`), the cyclical
schedule (:mod:`.schedule`) and its tuning (:mod:`.tuning`), the model read into discrete
variables (:mod:`.target`) and one chain assembled from them (:mod:`.chain`); :mod:`.kernels`
wraps it as NumPyro kernels.
"""

from numpyro_extras.discrete.chain import ACSState
from numpyro_extras.discrete.distributions import OneHotCategorical
from numpyro_extras.discrete.kernels import ACS, DMALA
from numpyro_extras.discrete.proposal import (
    ACSInfo,
    ChainState,
    DiscreteVariable,
    acceptance_probability,
    acs_step,
    acs_transition,
    decode,
    encode,
    init_chain,
    local_differences_fn,
    proposal_log_prob,
    proposal_logits,
    squared_jump,
)
from numpyro_extras.discrete.schedule import (
    CyclicalSchedule,
    cosine_balancing,
    cyclical_step_sizes,
)
from numpyro_extras.discrete.target import GRAD_MODES
from numpyro_extras.discrete.tuning import (
    ALPHA_MAX_RULES,
    TuningResult,
    TuningSettings,
    default_alpha_ceil,
    default_alpha_max_rule,
    default_beta_max,
    resolve_settings,
    tune_schedule,
    tuning_cost,
)

__all__ = [
    "ACSInfo",
    "ACS",
    "ALPHA_MAX_RULES",
    "ACSState",
    "DMALA",
    "GRAD_MODES",
    "OneHotCategorical",
    "ChainState",
    "CyclicalSchedule",
    "DiscreteVariable",
    "TuningResult",
    "TuningSettings",
    "acceptance_probability",
    "acs_step",
    "acs_transition",
    "cosine_balancing",
    "cyclical_step_sizes",
    "decode",
    "default_alpha_ceil",
    "default_alpha_max_rule",
    "default_beta_max",
    "encode",
    "init_chain",
    "local_differences_fn",
    "proposal_log_prob",
    "proposal_logits",
    "resolve_settings",
    "squared_jump",
    "tune_schedule",
    "tuning_cost",
]
