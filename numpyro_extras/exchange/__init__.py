"""Replica exchange: non-reversible parallel tempering for NumPyro models, with a ladder tuned
from swap rejection rates and a stepping-stone estimate of ``log Z``."""

from numpyro_extras.exchange.chains import ExchangeState, replica_exchange
from numpyro_extras.exchange.core import even_odd_swap
from numpyro_extras.exchange.kernels import ReplicaExchange
from numpyro_extras.exchange.ladder import (
    communication_barrier,
    equalized_ladder,
    initial_ladder,
    replicas_for_barrier,
)
from numpyro_extras.exchange.path import TemperedPath, prior_path, reference_path
from numpyro_extras.exchange.plots import plot_exchange

__all__ = [
    "ExchangeState",
    "ReplicaExchange",
    "TemperedPath",
    "communication_barrier",
    "equalized_ladder",
    "even_odd_swap",
    "initial_ladder",
    "plot_exchange",
    "prior_path",
    "reference_path",
    "replica_exchange",
    "replicas_for_barrier",
]
