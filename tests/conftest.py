"""Test setup: two host devices for parallel chains, float64, a headless plot backend."""

import os

os.environ.setdefault("MPLBACKEND", "Agg")

import numpyro  # noqa: E402

# Must happen before JAX initialises its backend: parallel chains need two CPU devices.
numpyro.set_host_device_count(2)
# Closed-form log Z checks are sharper than float32 rounding of potentials in the hundreds.
numpyro.enable_x64()
