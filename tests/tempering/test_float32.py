"""The kernels in NumPyro's default single precision (the test session itself runs in float64,
so this runs in a fresh interpreter)."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

SCRIPT = """
import json, jax, numpy as np
from numpyro.infer import MCMC
import numpyro_extras as nx
from numpyro_extras import targets

assert not jax.config.jax_enable_x64
base = nx.GaussianBase(np.array([-1.6], np.float32), np.array([[7.98]], np.float32), 2.0)
results = {}
for kernel_class in (nx.JointContinuousTempering, nx.GibbsContinuousTempering):
    mcmc = MCMC(kernel_class(targets.bimodal_model, base=base), num_warmup=300, num_samples=1500,
                num_chains=4, chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), 2.0)
    evidence = nx.log_marginal_likelihood(mcmc)
    x = mcmc.get_samples()["x"]
    results[kernel_class.__name__] = [evidence.log_z, evidence.stderr, str(x.dtype)]
print(json.dumps(results))
"""


def test_single_precision_run():
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, check=True
    )
    results = json.loads(completed.stdout.strip().splitlines()[-1])
    for log_z, stderr, dtype in results.values():
        assert dtype == "float32"
        assert 0 < stderr < 0.15
        assert abs(log_z - 2.0) < 4 * stderr
