"""Test setup: two host devices, float64, a headless plot backend, quick XLA compiles."""

import os
from importlib.metadata import version

from packaging.version import Version

os.environ.setdefault("MPLBACKEND", "Agg")
# The tests run small targets for a few thousand steps, so XLA's compile time outweighs the
# run time of the code it optimises; unoptimised CPU code compiles faster and gives the same draws
# up to rounding. XLA's older loop emitters for fused operations compile faster than its MLIR
# fusion emitters; jaxlib 0.12 dropped the older ones with their flag, which XLA would refuse.
_xla_flags = [os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0"]
if Version(version("jaxlib")) < Version("0.12"):
    _xla_flags.append("--xla_cpu_use_fusion_emitters=false")
os.environ["XLA_FLAGS"] = " ".join(_xla_flags).strip()

import numpyro  # noqa: E402

# Must happen before JAX initialises its backend: parallel chains need two CPU devices.
numpyro.set_host_device_count(2)
# Closed-form log Z checks are sharper than float32 rounding of potentials in the hundreds.
numpyro.enable_x64()


import tempfile  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402

# Most of the suite's time is XLA compilation, and much of it compiles the same programs again
# (the eager operations of model tracing and of the base fits, the same kernel on the same
# model in several tests), which JAX's persistent cache then loads instead; both workers share
# it. It lives outside the repository, in the system's temporary directory.
if os.environ.get("NUMPYRO_EXTRAS_TEST_JAX_CACHE", "1") != "0":
    jax.config.update(
        "jax_compilation_cache_dir",
        os.path.join(tempfile.gettempdir(), "numpyro_extras_tests_jax_cache"),
    )
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


# The files that take minutes, longest first. pytest-xdist's --dist loadfile hands the files
# to its workers in collection order, and the root files come last in it: started first, the
# long files share the two workers, and the run ends on short files instead of one worker
# finishing a long file while the other waits.
LONG_FILES = (
    "shell/test_devices.py",
    "involutive/test_involutive_training.py",
    "exchange/test_exchange_kernels.py",
    "shell/test_kernel.py",
    "exchange/test_exchange_stabilized.py",
    "conformance/test_conformance_ai_sampler.py",
    "bridge/test_bridge_runs.py",
    "tempering/test_base_fit.py",
    "slmc/test_slmc_annealing.py",
    "test_calibration.py",
    "exchange/test_exchange_devices.py",
)


def pytest_collection_modifyitems(config, items):
    """Run the files of ``LONG_FILES`` first, in its order; the rest keep theirs."""
    tests_dir = os.path.dirname(os.path.abspath(__file__))

    def rank(item):
        relative = os.path.relpath(str(item.path), tests_dir).replace(os.sep, "/")
        return LONG_FILES.index(relative) if relative in LONG_FILES else len(LONG_FILES)

    items.sort(key=rank)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_code():
    """Drop JAX's compiled executables after each test module: a worker process runs dozens of
    modules, none of which reuses another's compilations, and what it keeps only grows."""
    yield
    jax.clear_caches()


@pytest.fixture
def counted_model():
    """A Student-t model with a plate, and a dict counting how often its Python ran."""
    import numpyro.distributions as dist

    calls = {"model": 0}

    def model(y):
        calls["model"] += 1
        mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
        scale = numpyro.sample("scale", dist.HalfNormal(2.0))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.StudentT(4.0, mu, scale), obs=y)

    return model, calls
