"""Chains on several devices: every kernel under ``chain_method="parallel"`` on four host
devices, in a fresh interpreter (the device count is fixed before JAX starts), runs its
warm-up and gives, for the same key, the draws of the same chains run vectorized on one.

The draws are compared without warm-up: the vectorized and the per-device programs round
differently, and a warm-up's step-size and mass adaptation carries those last-bit
differences into every later step (replica exchange's chains then part for good)."""

import numpy as np
import pytest
from four_devices import run_records

from numpyro_extras.shell.devices import split_invariant_sum

SCRIPT = """
def spins(coupling):
    with numpyro.plate("sites", 6):
        s = numpyro.sample("s", dist.Bernoulli(0.5))
    signs = 2.0 * s - 1.0
    numpyro.factor("coupling", coupling * jnp.sum(signs[1:] * signs[:-1]))

continuous = (x, 0.7 * x + 0.1 * jnp.sin(7.0 * x))
kernels = {
    "GibbsContinuousTempering": (lambda: nx.GibbsContinuousTempering(regression), continuous),
    "JointContinuousTempering": (lambda: nx.JointContinuousTempering(regression), continuous),
    "ReplicaExchange": (lambda: nx.ReplicaExchange(regression), continuous),
    "AiSampler": (
        lambda: nx.AiSampler(
            regression,
            train_kwargs=dict(
                epochs=2, seed_epochs=1, seed_chains=2, seed_warmup=100, seed_samples=100
            ),
        ),
        continuous,
    ),
    "VAESLMC": (
        lambda: nx.VAESLMC(
            regression,
            fit_kwargs=dict(
                encoder_sizes=(16,), decoder_sizes=(16,), training_size=500, epochs=5,
                initial_epochs=10, num_data_chains=10, num_check_chains=5, num_check_steps=50,
                initial_exchange_scans=50, initial_warmup=50,
            ),
        ),
        continuous,
    ),
    "ACS": (lambda: nx.ACS(spins), (0.5,)),
    "DMALA": (lambda: nx.DMALA(spins), (0.5,)),
    "ReplicaExchange(ACS)": (lambda: nx.ReplicaExchange(spins, inner_kernel=nx.ACS), (0.5,)),
}
records = {}
for name, (make, args) in kernels.items():
    draws = {}
    # One kernel for the three runs: the first, parallel, reads the model inside pmap's trace;
    # the later runs reuse what it read, as a user's second run does.
    kernel = make()
    for label, chain_method, num_warmup in (
        ("parallel", "parallel", 0), ("vectorized", "vectorized", 0), ("warmed", "parallel", 50)
    ):
        mcmc = MCMC(
            kernel, num_warmup=num_warmup, num_samples=100, num_chains=4,
            chain_method=chain_method, progress_bar=False,
        )
        mcmc.run(jax.random.PRNGKey(3), *args)
        draws[label] = {
            site: np.asarray(values).tolist()
            for site, values in mcmc.get_samples(group_by_chain=True).items()
        }
    records[name] = draws
print(json.dumps(records))
"""


@pytest.mark.slow
def test_every_kernel_runs_its_chains_on_four_devices():
    records = run_records(SCRIPT)
    assert len(records) == 8
    for name, draws in records.items():
        for site, vectorized in draws["vectorized"].items():
            vectorized = np.asarray(vectorized)
            parallel = np.asarray(draws["parallel"][site])
            assert parallel.shape == vectorized.shape and parallel.shape[:2] == (4, 100), name
            # Most draws agree to rounding, where a wrongly keyed chain agrees almost nowhere.
            close = np.isclose(parallel, vectorized, rtol=1e-6, atol=1e-9)
            agree = close.reshape(close.shape[:2] + (-1,)).all(-1).mean()
            assert agree >= 0.9, f"{name}: {site} agrees at {agree:.1%} of the draws"
            warmed = np.asarray(draws["warmed"][site])
            assert warmed.shape == vectorized.shape and np.all(np.isfinite(warmed)), name
            # Four separate chains after warm-up, not one chain copied to every device.
            assert len({chain.tobytes() for chain in warmed}) == 4, name


def test_arrays_of_one_process_are_read_as_they_are():
    """Gathering and replicating for several ``jax.distributed`` processes leave the runs of one
    process untouched (examples/distributed.py runs two processes)."""
    import jax
    import jax.numpy as jnp

    from numpyro_extras.shell.devices import (
        gathered,
        leading_axis_sharding,
        readable_on_every_process,
    )

    tree = {"weights": jnp.arange(4.0), "rest": (np.ones(2), None)}
    assert gathered(tree) is tree
    sharding = leading_axis_sharding(jax.devices()[:2], "lanes")
    assert readable_on_every_process(tree, sharding) is tree
    assert readable_on_every_process(tree, None) is tree


def pairwise_sum(values):
    """The sum over the leading axis in split_invariant_sum's order, in NumPy."""
    values = np.asarray(values)
    size = 1 << (len(values) - 1).bit_length()
    values = np.concatenate([values, np.zeros((size - len(values),) + values.shape[1:])])
    while len(values) > 1:
        values = values[0::2] + values[1::2]
    return values[0]


@pytest.mark.parametrize("shape", [(1,), (3,), (8,), (400, 3)])
def test_split_invariant_sum_adds_neighbours_level_by_level(shape):
    magnitudes = np.logspace(-8, 8, shape[0]).reshape((-1,) + (1,) * (len(shape) - 1))
    values = np.random.default_rng(0).normal(size=shape) * magnitudes
    total = np.asarray(split_invariant_sum(values))
    assert total.shape == shape[1:]
    assert np.array_equal(total, pairwise_sum(values))
    np.testing.assert_allclose(total, values.sum(0), rtol=1e-12)


SUM_SCRIPT = """
from numpyro_extras.shell.devices import leading_axis_sharding, split_invariant_sum

values = np.random.default_rng(1).normal(size=(400, 3)) * np.logspace(-8, 8, 400)[:, None]
summed = jax.jit(split_invariant_sum)
records = {
    str(count): np.asarray(
        summed(jax.device_put(values, leading_axis_sharding(jax.devices()[:count], "lanes")))
    ).tolist()
    for count in (1, 2, 4)
}
print(json.dumps(records))
"""


def test_split_invariant_sum_is_the_same_on_any_split():
    """Summed where its lanes are split over one, two or four devices: the same bits, where a
    plain sum adds each device's share first."""
    records = run_records(SUM_SCRIPT)
    assert records["1"] == records["2"] == records["4"]
