"""The start of a script that runs in a fresh interpreter with four host devices (the device
count is fixed before JAX starts), with a small regression model for the tests to run, and the
run of such a script."""

import json
import subprocess
import sys

PREAMBLE = """
import json, sys
import numpyro
numpyro.set_host_device_count(4)
numpyro.enable_x64()
import jax, jax.numpy as jnp, numpyro.distributions as dist
import numpy as np
from numpyro.infer import MCMC
import numpyro_extras as nx

assert jax.device_count() == 4

def regression(x, y):
    slope = numpyro.sample("slope", dist.Normal(0.0, 2.0))
    scale = numpyro.sample("scale", dist.HalfNormal(1.0))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal(slope * x, scale), obs=y)

x = jnp.linspace(-1.0, 1.0, 8)
"""


def run_records(body: str, timeout: int = 900):
    """Run ``PREAMBLE + body`` in a fresh interpreter; its last printed line, JSON, decoded.

    :param str body: the script after the preamble; it ends by printing one JSON line.
    :param int timeout: seconds before the run is stopped.
    :return: the decoded records.
    """
    completed = subprocess.run(
        [sys.executable, "-c", PREAMBLE + body], capture_output=True, text=True, timeout=timeout
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])
