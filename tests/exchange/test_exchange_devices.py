"""nx.ReplicaExchange with its rungs' moves split over several devices, in a fresh interpreter
with four host devices (the device count is fixed before JAX starts): the chains' states live on
the devices asked for, and the draws and log Z are the one-device ones within their Monte Carlo
error (a partitioned program rounds its arithmetic in its own way, and a rounding difference
that turns a Metropolis decision parts the chains); a split that cannot be made is refused with
the reason."""

import numpy as np
import pytest
from four_devices import run_records

pytestmark = pytest.mark.slow

SCRIPT = """
from numpyro.diagnostics import effective_sample_size

y = 0.7 * x + 0.3 * jnp.sin(3.0 * x)
records = {}
for devices in (None, 2):
    kernel = nx.ReplicaExchange(regression, num_replicas=4, devices=devices)
    mcmc = MCMC(
        kernel, num_warmup=150, num_samples=400, num_chains=2, chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(0), x, y)
    slope = np.asarray(mcmc.get_samples(group_by_chain=True)["slope"])
    evidence = nx.log_marginal_likelihood(mcmc)
    records[str(devices)] = {
        "slope": slope.ravel().tolist(),
        "slope_ess": float(effective_sample_size(slope[..., None])[0]),
        "log_z": [float(evidence.log_z), float(evidence.stderr)],
        "devices holding the state": sorted(
            {len(leaf.sharding.device_set) for leaf in jax.tree.leaves(mcmc.last_state)}
        ),
    }

errors = {}
for devices in (8, "two"):
    try:
        nx.ReplicaExchange(regression, devices=devices)
    except (TypeError, ValueError) as error:
        errors[str(devices)] = f"{type(error).__name__}: {error}"
try:
    MCMC(nx.ReplicaExchange(regression, num_replicas=4, devices=2), num_warmup=5,
         num_samples=5, num_chains=2, chain_method="parallel", progress_bar=False).run(
        jax.random.PRNGKey(0), x, y)
except ValueError as error:
    errors["parallel"] = str(error)
records["errors"] = errors
print(json.dumps(records))
"""


def test_the_rungs_split_over_devices_give_the_one_device_posterior():
    records = run_records(SCRIPT)
    one, split = records["None"], records["2"]
    # The chains' states (every rung's) live on the two devices the moves ran on.
    assert one["devices holding the state"] == [1]
    assert split["devices holding the state"] == [2]
    assert min(one["slope_ess"], split["slope_ess"]) > 100
    mean_gap = np.mean(one["slope"]) - np.mean(split["slope"])
    standard_errors = [np.std(run["slope"]) / np.sqrt(run["slope_ess"]) for run in (one, split)]
    assert abs(mean_gap) < 4 * np.hypot(*standard_errors)
    (log_z, stderr), (split_log_z, split_stderr) = one["log_z"], split["log_z"]
    assert 0 < stderr < 0.2 and 0 < split_stderr < 0.2
    assert abs(log_z - split_log_z) < 4 * np.hypot(stderr, split_stderr)
    errors = records["errors"]
    assert "devices=8, but JAX has 4 device(s)" in errors["8"]
    assert errors["two"].startswith("TypeError: devices must be")
    assert "chain_method='parallel' puts each chain on a device" in errors["parallel"]
