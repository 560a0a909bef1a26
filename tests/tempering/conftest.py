"""Fixtures shared by the tempering tests: one Gibbs continuous tempering run on the bimodal
target of Graham & Storkey (Sec. 7.1), scaled to a known ``log Z``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer import MCMC

import numpyro_extras as nx
from numpyro_extras import targets

BIMODAL_LOG_Z = 2.0
BIMODAL_BASE = nx.GaussianBase(
    jnp.array([-1.6]), jnp.array([[np.sqrt(63.64)]]), jnp.asarray(BIMODAL_LOG_Z - 0.5)
)


@pytest.fixture(scope="session")
def bimodal_log_z():
    """``log Z`` of ``targets.bimodal_model`` as the tests call it."""
    return BIMODAL_LOG_Z


@pytest.fixture(scope="session")
def bimodal_run():
    """80 chains of Gibbs continuous tempering on ``targets.bimodal_model``, run once per worker
    for the evidence, posterior, diagnostics and plot tests."""
    mcmc = MCMC(
        nx.GibbsContinuousTempering(targets.bimodal_model, base=BIMODAL_BASE),
        num_warmup=300,
        num_samples=1000,
        num_chains=80,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(11), BIMODAL_LOG_Z)
    return mcmc
