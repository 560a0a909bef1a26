"""Conformance of the discrete kernels (``nx.ACS``, ``nx.DMALA``, ``nx.ReplicaExchange(model,
inner_kernel=nx.ACS)``) on the zoo's discrete and mixed models, the run controls on the
cheapest pair (with float32), and every kernel's refusal of the models it does not take."""

import jax
import jax.numpy as jnp
import pytest
from conformance_runs import (
    KERNELS,
    ConformanceTests,
    check_chain_method,
    check_continuation,
    check_float32,
    check_init_params,
    check_same_key_same_draws,
)
from numpyro.infer import MCMC
from zoo import ZOO


class TestDiscreteKernels(ConformanceTests):
    PAIRS = (
        ("ACS", "ising_chain"),
        ("DMALA", "ising_chain"),
        ("ReplicaExchange(ACS)", "ising_chain"),
        ("ReplicaExchange(ACS)", "mixed"),
    )


# DMALA on the Ising chain is the cheapest pair of the suite: the run controls run on it.


@pytest.mark.parametrize("chain_method", ["parallel", "sequential"])
def test_chain_methods(chain_method):
    check_chain_method("DMALA", "ising_chain", chain_method)


def test_same_key_same_draws():
    check_same_key_same_draws("DMALA", "ising_chain")


def test_post_warmup_state_continues_the_chain():
    check_continuation("DMALA", "ising_chain")


@pytest.mark.slow
def test_float32():
    check_float32([("DMALA", "ising_chain")])


def test_init_params():
    # (ACS is left out: its tuner runs in init from init_params, by design, and the state
    # init returns is where the tuning left the chain.)
    check_init_params("DMALA", "ising_chain", {"spins": jnp.array([1, 0] * 5)})


# The kernel a refusal must name, by the kind of model refused.
SERVES_DISCRETE = r"nx\.ReplicaExchange\(model, inner_kernel=nx\.ACS\)|inner_kernel=nx\.ACS"
SERVES_MIXED_WITH_ACS = r"inner_kernel=NUTS"
SERVES_CONTINUOUS = r"NUTS"
REFUSALS = [
    (kernel, model, SERVES_DISCRETE)
    for kernel in (
        "JointContinuousTempering",
        "GibbsContinuousTempering",
        "ReplicaExchange",
        "AiSampler",
        "VAESLMC",
    )
    for model in ("ising_chain", "mixed")
] + [
    ("ACS", "mixed", SERVES_MIXED_WITH_ACS),
    ("DMALA", "mixed", SERVES_MIXED_WITH_ACS),
    ("ACS", "regression", SERVES_CONTINUOUS),
    ("DMALA", "regression", SERVES_CONTINUOUS),
    ("ReplicaExchange(ACS)", "regression", SERVES_CONTINUOUS),
]


@pytest.mark.parametrize(
    "kernel_name, model_name, serves", REFUSALS, ids=[f"{k}-{m}" for k, m, _ in REFUSALS]
)
def test_out_of_scope_models_are_refused(kernel_name, model_name, serves):
    """A kernel given a model it cannot sample refuses, at construction or on the first run,
    with an error naming the kernel that serves the model."""
    zoo_model = ZOO[model_name]
    with pytest.raises(ValueError, match=serves):
        kernel = KERNELS[kernel_name](zoo_model.model)
        MCMC(kernel, num_warmup=5, num_samples=5, progress_bar=False).run(
            jax.random.PRNGKey(0), *zoo_model.args
        )
