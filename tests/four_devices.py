"""The start of a script that runs in a fresh interpreter with four host devices (the device
count is fixed before JAX starts), with a small regression model for the tests to run."""

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
