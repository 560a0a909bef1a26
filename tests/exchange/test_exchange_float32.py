"""Replica exchange in NumPyro's default single precision (the test session itself runs in
float64, so this runs in a fresh interpreter)."""

import json
import subprocess
import sys

import numpy as np
import pytest
from scipy.stats import norm

pytestmark = pytest.mark.slow

SCRIPT = """
import json, jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
from numpyro.infer import HMC, MCMC
import numpyro_extras as nx

assert not jax.config.jax_enable_x64

def model(y):
    with numpyro.plate("data", 3):
        x = numpyro.sample("x", dist.Normal(0.0, 1.0))
        numpyro.sample("y", dist.Normal(x, 0.5), obs=y)

# Fixed-length HMC moves (the tempering kernels' single-precision test runs NUTS): the two legs
# and the evidence are what is checked here, and HMC compiles faster.
kernel = nx.ReplicaExchange(model, num_replicas=6, inner_kernel=HMC, num_steps=5)
mcmc = MCMC(kernel, num_warmup=300, num_samples=1500, num_chains=4, chain_method="vectorized",
            progress_bar=False)
mcmc.run(jax.random.PRNGKey(0), jnp.array([1.0, -2.0, 0.5]))
evidence = nx.log_marginal_likelihood(mcmc, warn=False)
print(json.dumps([evidence.log_z, evidence.stderr, str(mcmc.get_samples()["x"].dtype)]))
"""


def test_single_precision_run():
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, check=True
    )
    log_z, stderr, dtype = json.loads(completed.stdout.strip().splitlines()[-1])
    truth = float(np.sum(norm.logpdf([1.0, -2.0, 0.5], 0.0, np.sqrt(1.25))))
    assert dtype == "float32"
    assert 0 < stderr < 0.15
    assert abs(log_z - truth) < 4 * stderr
