"""Annealed importance sampling: the shared driver, AIS for NumPyro models, marginalized AIS."""

from numpyro_extras.annealing.batched import batched_ais
from numpyro_extras.annealing.boltzmann import (
    BipartiteBoltzmann,
    checkerboard_sites,
    ising_lattice,
    random_rbm,
    rbm,
)
from numpyro_extras.annealing.boltzmann_models import ising_model, rbm_model
from numpyro_extras.annealing.driver import (
    AnnealingResult,
    anneal,
    inverse_temperature_schedule,
)
from numpyro_extras.annealing.mais import (
    BoltzmannComparison,
    ais_boltzmann,
    mais_vs_ais,
    marginalized_ais_boltzmann,
)
from numpyro_extras.annealing.model_annealing import ais
from numpyro_extras.results.evidence import evidence_from_log_weights

__all__ = [
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
    "AnnealingResult",
    "anneal",
    "evidence_from_log_weights",
    "inverse_temperature_schedule",
]
