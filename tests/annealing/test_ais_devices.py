"""nx.ais with its particles split over several devices, in a fresh interpreter with four host
devices (the device count is fixed before JAX starts): every split anneals the same particles
with the same keys and adapts from sums over them added in one order, so its estimate is the
one-device estimate up to rounding, or within the error bars where a rounding difference turned
a Metropolis decision (XLA simplifies each device's program for its own shapes); from the prior,
two and four devices agree to the last bit; the particles live on the devices asked for; a
split that cannot be made is refused with the reason."""

import numpy as np
import pytest
from four_devices import run_records

pytestmark = pytest.mark.slow

SCRIPT = """
from numpyro_extras.annealing.driver import anneal

args = (x, 0.7 * x + 0.1 * jnp.sin(7.0 * x))
records = {}
for base in ("prior", "auto"):
    for devices in (None, 2, 4, jax.devices()[1:3]):
        evidence = nx.ais(
            jax.random.PRNGKey(3), regression, args, num_particles=400, num_temperatures=60,
            base=base, devices=devices, progress_bar=False,
        )
        label = devices if devices is None or isinstance(devices, int) else "devices 1-2"
        records[f"{base} {label}"] = [float(evidence.log_z), float(evidence.stderr)]

# Where the driver's particles live when split.
result = anneal(
    jax.random.PRNGKey(0), lambda position, beta: -0.5 * beta * jnp.sum(position**2),
    jnp.zeros((8, 2)),
    lambda key, positions, beta, state: (positions, state, jnp.ones(())),
    jnp.linspace(0.0, 1.0, 5), devices=4, progress_bar=False,
)
records["devices holding the weights"] = len(result.log_weights.sharding.device_set)

errors = {}
for devices in (3, 8, "two", [0, 1]):
    try:
        nx.ais(jax.random.PRNGKey(0), regression, args, num_particles=400, num_temperatures=10,
               devices=devices, progress_bar=False)
    except (TypeError, ValueError) as error:
        errors[str(devices)] = f"{type(error).__name__}: {error}"
records["errors"] = errors
print(json.dumps(records))
"""


def test_every_split_of_the_particles_gives_the_one_device_estimate():
    records = run_records(SCRIPT)
    for base in ("prior", "auto"):
        log_z, stderr = records[f"{base} None"]
        assert np.isfinite(log_z) and 0 < stderr < 1.0
        for label in ("2", "4", "devices 1-2"):
            split_log_z, split_stderr = records[f"{base} {label}"]
            assert abs(split_log_z - log_z) < 4 * np.hypot(stderr, split_stderr) / np.sqrt(2)
            assert 0.8 < split_stderr / stderr < 1.25
        # Two devices, whichever two: the same program, the same numbers.
        assert records[f"{base} 2"] == records[f"{base} devices 1-2"]
    # From the prior, where the particles travel far and a rounding difference would turn
    # Metropolis decisions, two and four devices anneal alike to the last bit: the adaptation
    # sums over the particles in one order whatever the split.
    assert records["prior 2"] == records["prior 4"]
    # From the fitted base every particle moves little: the splits agree to rounding.
    for label in ("2", "4", "devices 1-2"):
        np.testing.assert_allclose(records[f"auto {label}"], records["auto None"], rtol=1e-8)
    assert records["devices holding the weights"] == 4
    errors = records["errors"]
    assert "400 particles cannot be split evenly over 3 devices" in errors["3"]
    assert "devices=8, but JAX has 4 device(s)" in errors["8"]
    assert errors["two"].startswith("TypeError: devices must be")
    assert errors["[0, 1]"].startswith("TypeError: devices must be")


BATCHED_SCRIPT = """
rng = np.random.default_rng(0)
xs = rng.normal(size=(10, 8))
ys = 0.7 * xs + 0.3 * rng.normal(size=xs.shape)
records = {}
for base in ("auto", "prior"):
    for devices in (None, 2, 4, jax.devices()[1:3]):
        evidences = nx.batched_ais(
            jax.random.PRNGKey(5), regression, (xs, ys), num_particles=100, num_temperatures=30,
            base=base, devices=devices, progress_bar=False,
        )
        label = devices if devices is None or isinstance(devices, int) else "devices 1-2"
        records[f"{base} {label}"] = [[e.log_z, e.stderr, len(e.problems)] for e in evidences]
try:
    nx.batched_ais(jax.random.PRNGKey(5), regression, (xs, ys), num_particles=100,
                   num_temperatures=30, devices=8, progress_bar=False)
except ValueError as error:
    records["error"] = str(error)
print(json.dumps(records))
"""


def test_every_split_of_the_data_sets_gives_the_same_estimates():
    records = run_records(BATCHED_SCRIPT)
    for base in ("auto", "prior"):
        one_device = records[f"{base} None"]
        assert len(one_device) == 10
        assert all(np.isfinite(log_z) and stderr > 0 for log_z, stderr, _ in one_device)
        # Each device runs the one-device program on its own data sets: the same numbers for
        # every split, to the last bits of rounding against one device, whose program XLA
        # compiles in its own way (from the prior, where the particles travel far, a rounding
        # difference may turn a Metropolis decision: within the error bars then); splits over
        # several devices, to the last bit.
        for label in ("2", "4", "devices 1-2"):
            split = np.array(records[f"{base} {label}"])
            if base == "auto":
                np.testing.assert_allclose(split, one_device, rtol=1e-8)
            else:
                gap = np.abs(split[:, 0] - np.array(one_device)[:, 0])
                assert np.all(gap < 4 * np.array(one_device)[:, 1])
        assert records[f"{base} 2"] == records[f"{base} devices 1-2"] == records[f"{base} 4"]
    assert "devices=8, but JAX has 4 device(s)" in records["error"]
