"""Conformance of ``nx.GibbsContinuousTempering`` on its share of the zoo's continuous models
(``MODELS``; ``nx.JointContinuousTempering`` takes the others), and the run controls (parallel
chains, the same key, ``init_params``, ``jit_model_args``, ``post_warmup_state``) on its
cheapest pair, the conjugate regression."""

import jax.numpy as jnp
import pytest
from conformance_runs import (
    ConformanceTests,
    check_chain_method,
    check_continuation,
    check_init_params,
    check_jit_model_args,
    check_same_key_same_draws,
)

KERNEL = "GibbsContinuousTempering"


# The two tempering kernels share the base fit and the estimators, and a pair costs 5-12 s at
# defaults (the base fit and the compilations), so the continuous models are split between
# them, the two-mode regression in both.
MODELS = ("two_mode", "mixture_2d", "eight_schools_noncentred", "truncated", "regression")


class TestGibbsContinuousTempering(ConformanceTests):
    PAIRS = tuple((KERNEL, name) for name in MODELS)


@pytest.mark.slow
def test_parallel_chains():
    check_chain_method(KERNEL, "regression", "parallel")


def test_same_key_same_draws():
    check_same_key_same_draws(KERNEL, "regression")


def test_init_params():
    check_init_params(KERNEL, "regression", {"w": jnp.array([3.0, -3.0])})


@pytest.mark.slow
def test_jit_model_args_on_two_data_sets():
    check_jit_model_args(KERNEL, "regression")


def test_post_warmup_state_continues_the_chain():
    check_continuation(KERNEL, "regression")
