"""The conformance suite's machinery: the kernels at their defaults, one cached run per
(kernel, model) pair, and the checks every pair gets (:class:`ConformanceTests`).

Each test file subclasses :class:`ConformanceTests` with its own ``PAIRS``; pytest-xdist's
``--dist loadfile`` keeps a file on one worker, so a pair's run is made once, by the first test
that asks for it, and every other check of that pair reads the same finished ``MCMC``.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from arviz_checks import loo_elpd
from numpyro import handlers
from numpyro.distributions.transforms import biject_to
from numpyro.infer import MCMC, Predictive
from numpyro.infer.util import log_density, potential_energy, unconstrain_fn
from zoo import DISCRETE, ZOO

import numpyro_extras as nx
from numpyro_extras.results.arviz_adapter import ess

KERNELS = {
    "JointContinuousTempering": nx.JointContinuousTempering,
    "GibbsContinuousTempering": nx.GibbsContinuousTempering,
    "ReplicaExchange": nx.ReplicaExchange,
    "ReplicaExchange(ACS)": lambda model: nx.ReplicaExchange(model, inner_kernel=nx.ACS),
    "ACS": nx.ACS,
    "DMALA": nx.DMALA,
    "AiSampler": nx.AiSampler,
    "VAESLMC": nx.VAESLMC,
}
# The kernels that estimate log Z (nx.log_marginal_likelihood takes their runs).
ESTIMATING = {
    "JointContinuousTempering",
    "GibbsContinuousTempering",
    "ReplicaExchange",
    "ReplicaExchange(ACS)",
    "VAESLMC",
}
# The kernels whose posterior draw moves by a NUTS trajectory: NumPyro's "diverging" and
# "num_steps" have their meaning there.
TRAJECTORY = {"JointContinuousTempering", "GibbsContinuousTempering", "ReplicaExchange"}
# Metropolis-Hastings kernels whose proposal never equals the current point: a step moves the
# draw exactly when it is accepted, so E[moved] = E[accept_prob].
CONTINUOUS_PROPOSALS = {"AiSampler", "VAESLMC"}
# Small runs (the kernels' settings are all defaults). ACS and DMALA make cheap steps with
# autocorrelation times of tens of steps on the Ising chain, so they get more steps per draw.
SIZES = dict(num_warmup=300, num_samples=600, num_chains=2)
DISCRETE_SIZES = dict(num_warmup=500, num_samples=5000, num_chains=4, thinning=5)
SIZES_BY_KERNEL = {"ACS": DISCRETE_SIZES, "DMALA": DISCRETE_SIZES}
# A log Z estimate less precise than this cannot tell a right estimator from a wrong one.
MAX_LOG_Z_STDERR = 0.15
MAX_ABS_Z = 4.0
RUN_KEY = jax.random.PRNGKey(0)


def kernel_fields(kernel_name):
    fields = ("potential_energy", "accept_prob")
    return fields + (("diverging", "num_steps") if kernel_name in TRAJECTORY else ())


def package_warnings(caught):
    """The messages of the warnings a run raised that say something about the run (JAX's and
    NumPyro's notes about devices or dtypes do not)."""
    noise = ("There are not enough devices", "Explicitly requested dtype")
    return [
        f"{w.category.__name__}: {w.message}"
        for w in caught
        if issubclass(w.category, UserWarning) and not str(w.message).startswith(noise)
    ]


@dataclass
class Run:
    """One finished run of a pair and what it raised."""

    kernel_name: str
    zoo_model: object
    mcmc: MCMC
    seconds: float
    warnings: list
    evidence: object = None
    evidence_warnings: tuple = ()


_RUNS = {}


def make_mcmc(kernel_name, model_name, **overrides):
    sizes = dict(SIZES_BY_KERNEL.get(kernel_name, SIZES))
    sizes.update(overrides)
    sizes.setdefault("chain_method", "vectorized")
    kernel = KERNELS[kernel_name](ZOO[model_name].model)
    return MCMC(kernel, progress_bar=False, **sizes)


def run_pair(kernel_name, model_name):
    """The pair's one shared run (key 0, the kernel's extra fields), made on first use."""
    key = (kernel_name, model_name)
    if key not in _RUNS:
        zoo_model = ZOO[model_name]
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mcmc = make_mcmc(kernel_name, model_name)
            mcmc.run(RUN_KEY, *zoo_model.args, extra_fields=kernel_fields(kernel_name))
            jax.block_until_ready(mcmc.get_samples())
        run = Run(
            kernel_name, zoo_model, mcmc, time.perf_counter() - start, package_warnings(caught)
        )
        if kernel_name in ESTIMATING:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                run.evidence = nx.log_marginal_likelihood(mcmc)
            run.evidence_warnings = package_warnings(caught)
        _RUNS[key] = run
    return _RUNS[key]


# --- the estimates --------------------------------------------------------------------------


def mean_and_stderr(values):
    """The mean of ``(chain, draw)`` values and its Monte Carlo standard error from ArviZ's
    effective sample size of the mean (0 for constant values, whose mean has no error)."""
    values = np.asarray(values, np.float64)
    mean, sd = float(values.mean()), float(values.std())
    if sd == 0.0:
        return mean, 0.0
    return mean, sd / math.sqrt(ess(values, method="mean"))


def check_failures(checks, samples):
    """A message for each check the draws fail: an estimate more than 4 standard errors from
    the exact value, or a standard error too large to tell a working sampler from a broken
    one."""
    failures = []
    for check in checks:
        mean, stderr = mean_and_stderr(check.statistic(samples))
        line = f"{check.name}: {mean:.4f} +- {stderr:.4f}, exact {check.exact:.4f}"
        if abs(mean - check.exact) > MAX_ABS_Z * stderr:
            off = (
                f"off by {abs(mean - check.exact) / stderr:.1f} se"
                if stderr > 0
                else "off, the statistic equal at every draw"
            )
            failures.append(f"{line} ({off})")
        elif stderr > check.max_stderr:
            failures.append(f"{line} (stderr above {check.max_stderr:.4f})")
    return failures


def log_z_line(evidence, exact):
    return f"log Z {evidence.log_z:.4f} +- {evidence.stderr:.4f}, exact {exact:.4f}"


def assert_log_z(evidence, zoo_model, warned, what):
    """A log Z within 4 of its standard errors of the zoo model's exact value, with a standard
    error small enough to catch a broken estimator, or a warning."""
    assert np.isfinite(evidence.log_z) and np.isfinite(evidence.stderr)
    assert evidence.stderr >= 0
    if zoo_model.log_z is None:
        return
    error = evidence.log_z - zoo_model.log_z
    line = log_z_line(evidence, zoo_model.log_z)
    failures = []
    # A standard error of exactly 0 is allowed only with an exact estimate (a reference that is
    # the posterior itself): then the error must be at rounding level.
    if abs(error) > max(MAX_ABS_Z * evidence.stderr, 1e-8):
        failures.append(f"{line} (off by {abs(error) / max(evidence.stderr, 1e-300):.1f} se)")
    elif evidence.stderr > MAX_LOG_Z_STDERR:
        failures.append(f"{line} (stderr above {MAX_LOG_Z_STDERR})")
    assert_right_or_warned(failures, warned, what)


def assert_right_or_warned(failures, warned, what):
    """Never confidently wrong: a wrong or too imprecise answer passes only when the run warned
    (the warnings must name the cause; they are shown when the test fails for want of one)."""
    if failures and not warned:
        raise AssertionError(f"{what} is wrong and nothing warned:\n  " + "\n  ".join(failures))


def latent_sites(model, args):
    """``{name: is_discrete}`` of the model's latent sample sites."""
    trace = handlers.trace(handlers.seed(model, 0)).get_trace(*args)
    return {
        name: bool(site["fn"].has_enumerate_support and site["fn"].is_discrete)
        for name, site in trace.items()
        if site["type"] == "sample" and not site["is_observed"]
    }


def model_potential(model, args, params):
    """NumPyro's potential energy at a draw of every latent site (constrained values): minus
    the log joint density on the unconstrained space of the continuous sites, the discrete
    sites at their values. For continuous models this is ``numpyro.infer.util.potential_energy``
    itself; with discrete sites, the same sum by hand (NumPyro's transforms have no bijection
    for a discrete support)."""
    sites = latent_sites(model, args)
    if not any(sites.values()):
        unconstrained = unconstrain_fn(model, args, {}, params)
        return float(potential_energy(model, args, {}, unconstrained))
    log_joint, trace = log_density(model, args, {}, params)
    for name, discrete in sites.items():
        if not discrete:
            site = trace[name]
            transform = biject_to(site["fn"].support)
            unconstrained = transform.inv(site["value"])
            log_joint = log_joint + jnp.sum(
                transform.log_abs_det_jacobian(unconstrained, site["value"])
            )
    return -float(log_joint)


def observed_sites(model, args):
    """The model's observed data sites (``numpyro.factor`` terms are observed sites of a
    ``Unit`` distribution too, but no data)."""
    trace = handlers.trace(handlers.seed(model, 0)).get_trace(*args)
    return [
        name
        for name, site in trace.items()
        if site["type"] == "sample"
        and site["is_observed"]
        and not isinstance(site["fn"], dist.Unit)
    ]


@pytest.mark.slow
class ConformanceTests:
    """The checks of every pair, on its one shared run. Subclasses set ``PAIRS``."""

    PAIRS = ()

    def test_posterior(self, run):
        """Moments and mode weights within 4 Monte Carlo standard errors of the exact answer,
        with a standard error small enough to catch a broken sampler, or a warning."""
        samples = run.mcmc.get_samples(group_by_chain=True)
        failures = check_failures(run.zoo_model.checks, samples)
        warned = run.warnings + list(run.evidence_warnings)
        assert_right_or_warned(failures, warned, f"{run.kernel_name}'s posterior")
        if failures:
            print("wrong but warned:", failures, warned)

    def test_log_marginal_likelihood(self, run):
        """``nx.log_marginal_likelihood`` within 4 of its standard errors of the exact log Z
        (or a warning) where the kernel gives one; a TypeError naming the kernels that do where
        it does not."""
        if run.kernel_name not in ESTIMATING:
            with pytest.raises(TypeError, match="gives no log Z"):
                nx.log_marginal_likelihood(run.mcmc, warn=False)
            return
        warned = run.warnings + list(run.evidence_warnings)
        assert_log_z(run.evidence, run.zoo_model, warned, f"{run.kernel_name}'s log Z")

    def test_bridge_sampling(self, run):
        """``nx.bridge_sampling`` of the run's draws within 4 of its standard errors of the
        exact log Z (or a warning, the run's or its own) on a model with continuous sites (its
        discrete sites summed out); an error that says so on a model of discrete sites only."""
        if run.zoo_model.kind == DISCRETE:
            with pytest.raises(ValueError, match="every latent site of the model"):
                nx.bridge_sampling(run.mcmc, warn=False)
            return
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            evidence = nx.bridge_sampling(run.mcmc)
        warned = run.warnings + package_warnings(caught)
        assert_log_z(evidence, run.zoo_model, warned, f"bridge sampling of {run.kernel_name}")

    def test_extra_fields(self, run):
        """NumPyro's extra fields with NumPyro's meaning: ``potential_energy`` is minus the log
        joint density on the unconstrained space at the draw; ``accept_prob`` a probability;
        ``diverging`` and ``num_steps`` those of the trajectory."""
        mcmc, zoo_model = run.mcmc, run.zoo_model
        fields = mcmc.get_extra_fields(group_by_chain=True)
        samples = mcmc.get_samples(group_by_chain=True)
        chains, draws = np.shape(fields["potential_energy"])
        assert (chains, draws) == np.shape(next(iter(samples.values())))[:2]
        assert (chains, draws) == (mcmc.num_chains, mcmc.num_samples // mcmc.thinning)
        latent = latent_sites(zoo_model.model, zoo_model.args)
        for chain, draw in ((0, 0), (0, draws // 2), (chains - 1, draws - 1)):
            params = {name: samples[name][chain, draw] for name in latent}
            expected = model_potential(zoo_model.model, zoo_model.args, params)
            np.testing.assert_allclose(
                float(fields["potential_energy"][chain, draw]), expected, rtol=1e-6, atol=1e-6
            )
        accept_prob = np.asarray(fields["accept_prob"], np.float64)
        assert accept_prob.shape == (chains, draws)
        assert np.all((accept_prob >= 0) & (accept_prob <= 1)), "accept_prob outside [0, 1]"
        assert accept_prob.mean() > 0.05, "the kernel (almost) never accepts"
        if run.kernel_name in TRAJECTORY:
            diverging = np.asarray(fields["diverging"])
            num_steps = np.asarray(fields["num_steps"])
            assert diverging.dtype == bool and diverging.shape == (chains, draws)
            assert np.issubdtype(num_steps.dtype, np.integer)
            assert num_steps.shape == (chains, draws) and np.all(num_steps >= 1)
        if run.kernel_name in CONTINUOUS_PROPOSALS:
            # A step moves the draw exactly when it accepts: E[moved - accept_prob] = 0.
            columns = [np.reshape(samples[name], (chains, draws, -1)) for name in latent]
            flat = np.concatenate(columns, -1)
            moved = np.any(flat[:, 1:] != flat[:, :-1], -1).astype(float)
            mean, stderr = mean_and_stderr(moved - accept_prob[:, 1:])
            assert abs(mean) <= MAX_ABS_Z * stderr + 1e-12, (mean, stderr)

    def test_summary_and_arviz(self, run, capsys):
        """``print_summary``, ``az.from_numpyro`` and ``nx.to_inference_data`` (posterior,
        sample_stats, log_likelihood where the model observes data, log Z in attrs only where
        the kernel gives one), and ``az.loo`` on it."""
        mcmc, zoo_model = run.mcmc, run.zoo_model
        latent = latent_sites(zoo_model.model, zoo_model.args)
        mcmc.print_summary()
        printed = capsys.readouterr().out
        for name in latent:
            assert name in printed
        samples = mcmc.get_samples(group_by_chain=True)
        for data in (az.from_numpyro(mcmc), nx.to_inference_data(mcmc)):
            for name in latent:
                np.testing.assert_array_equal(
                    np.asarray(data.posterior[name].values), np.asarray(samples[name])
                )
        data = nx.to_inference_data(mcmc)
        assert len(data.sample_stats.data_vars) > 0
        observed = observed_sites(zoo_model.model, zoo_model.args)
        if run.kernel_name in ESTIMATING:
            assert "log_marginal_likelihood" in data.attrs
        else:
            assert "log_marginal_likelihood" not in data.attrs
        if observed:
            shape = np.shape(samples[next(iter(latent))])[:2]
            for name in observed:
                assert data.log_likelihood[name].shape[:2] == shape
            assert np.isfinite(loo_elpd(az.loo(data)))

    def test_predictive(self, run):
        """``Predictive`` with the posterior draws: every observed site once per draw, and, for
        the regression (whose targets may be left out), posterior predictive draws that are the
        draws' deterministic means plus unit noise."""
        mcmc, zoo_model = run.mcmc, run.zoo_model
        samples = mcmc.get_samples()
        num_draws = np.shape(samples[next(iter(samples))])[0]
        predictions = Predictive(zoo_model.model, samples)(jax.random.PRNGKey(1), *zoo_model.args)
        for name in observed_sites(zoo_model.model, zoo_model.args):
            assert predictions[name].shape[0] == num_draws
        if zoo_model.name == "regression":
            features = zoo_model.args[0]
            np.testing.assert_allclose(samples["mean"], samples["w"] @ features.T, rtol=1e-10)
            predict = Predictive(zoo_model.model, samples)
            predictions = predict(jax.random.PRNGKey(1), features, None)
            noise = np.asarray(predictions["targets"] - samples["mean"])
            assert abs(noise.mean()) < MAX_ABS_Z / math.sqrt(noise.size)
            assert abs(noise.var() - 1) < MAX_ABS_Z * math.sqrt(2 / noise.size)


# --- run controls, on a few cheap pairs -------------------------------------------------------


def assert_same_draws(first, second, what):
    """The same draws. Discrete draws must match exactly; continuous ones to rounding, which a
    NUTS trajectory amplifies for a while before the common random numbers pull the two runs
    back together (two compiled programs, e.g. vmapped and not, round differently): at least
    90% of the (chain, draw) positions must agree to 1e-6, where a wrong key or a restarted
    chain agrees almost nowhere."""
    for name, values in first.items():
        values, other = np.asarray(values), np.asarray(second[name])
        assert values.shape == other.shape, what
        if np.issubdtype(values.dtype, np.integer) or values.dtype == bool:
            np.testing.assert_array_equal(other, values, err_msg=what)
            continue
        close = np.isclose(other, values, rtol=1e-6, atol=1e-9)
        agree = close.reshape(close.shape[:2] + (-1,)).all(-1).mean()
        assert agree >= 0.9, f"{what}: {name} agrees at {agree:.1%} of the draws"


def check_same_key_same_draws(kernel_name, model_name):
    """A fresh kernel and MCMC with the shared run's key give the shared run's draws."""
    shared = run_pair(kernel_name, model_name)
    mcmc = make_mcmc(kernel_name, model_name)
    mcmc.run(RUN_KEY, *shared.zoo_model.args, extra_fields=kernel_fields(kernel_name))
    assert_same_draws(
        shared.mcmc.get_samples(group_by_chain=True),
        mcmc.get_samples(group_by_chain=True),
        "the same key gave other draws",
    )


def check_chain_method(kernel_name, model_name, chain_method):
    """Every chain method gives the vectorized run's draws (the chains' keys are split the same
    way whichever way they run)."""
    shared = run_pair(kernel_name, model_name)
    mcmc = make_mcmc(kernel_name, model_name, chain_method=chain_method)
    mcmc.run(RUN_KEY, *shared.zoo_model.args, extra_fields=kernel_fields(kernel_name))
    assert_same_draws(
        shared.mcmc.get_samples(group_by_chain=True),
        mcmc.get_samples(group_by_chain=True),
        f"chain_method={chain_method!r} gave other draws than 'vectorized'",
    )


def check_continuation(kernel_name, model_name):
    """``mcmc.post_warmup_state = mcmc.last_state`` then ``run(last_state.rng_key)`` continues
    the chains: half the draws, continued for the other half, are the shared run's draws."""
    shared = run_pair(kernel_name, model_name)
    args = shared.zoo_model.args
    half = shared.mcmc.num_samples // 2
    mcmc = make_mcmc(kernel_name, model_name, num_samples=half)
    mcmc.run(RUN_KEY, *args)
    first = mcmc.get_samples(group_by_chain=True)
    mcmc.post_warmup_state = mcmc.last_state
    mcmc.run(mcmc.post_warmup_state.rng_key, *args)
    second = mcmc.get_samples(group_by_chain=True)
    expected = shared.mcmc.get_samples(group_by_chain=True)
    assert_same_draws(
        {name: np.asarray(values)[:, : 2 * half] for name, values in expected.items()},
        {name: np.concatenate([first[name], second[name]], axis=1) for name in expected},
        "the continued run is not the rest of the chain",
    )


def check_init_params(kernel_name, model_name, init_params):
    """``init_params`` (unconstrained values, as for NUTS) are where the chain starts: the
    kernel's initial state holds them."""
    zoo_model = ZOO[model_name]
    kernel = KERNELS[kernel_name](zoo_model.model)
    state = kernel.init(jax.random.PRNGKey(2), 10, init_params, zoo_model.args, {})
    start = getattr(state, kernel.sample_field)
    for name, value in init_params.items():
        np.testing.assert_allclose(np.asarray(start[name], np.float64), np.asarray(value))


def check_jit_model_args(kernel_name, model_name):
    """``jit_model_args=True``: one MCMC object run on two data sets of the same shapes gives
    each data set's posterior (and log Z)."""
    zoo_model = ZOO[model_name]
    mcmc = make_mcmc(kernel_name, model_name, jit_model_args=True)
    failures = []
    caught_all = []
    for args, checks, log_z in (
        (zoo_model.args, zoo_model.checks, zoo_model.log_z),
        (zoo_model.other_args, zoo_model.other_checks, zoo_model.other_log_z),
    ):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mcmc.run(RUN_KEY, *args)
            failures += check_failures(checks, mcmc.get_samples(group_by_chain=True))
            if kernel_name in ESTIMATING:
                evidence = nx.log_marginal_likelihood(mcmc)
                if abs(evidence.log_z - log_z) > MAX_ABS_Z * evidence.stderr:
                    failures.append(log_z_line(evidence, log_z))
        caught_all += package_warnings(caught)
    assert_right_or_warned(failures, caught_all, "jit_model_args=True")


FLOAT32_SCRIPT = """
import json, sys, warnings
sys.path[:0] = [{folder!r}, {tests!r}, {root!r}]
import jax
assert not jax.config.jax_enable_x64
from conformance_runs import RUN_KEY, check_failures, make_mcmc, package_warnings
from zoo import DISCRETE, ZOO
results = {{}}
for kernel_name, model_name in {pairs!r}:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc = make_mcmc(kernel_name, model_name)
        mcmc.run(RUN_KEY, *ZOO[model_name].args)
    samples = mcmc.get_samples(group_by_chain=True)
    results[kernel_name + ":" + model_name] = dict(
        dtypes=sorted({{str(value.dtype) for value in samples.values()}}),
        failures=check_failures(ZOO[model_name].checks, samples),
        warnings=package_warnings(caught),
    )
print(json.dumps(results))
"""


def check_float32(pairs):
    """The pairs in NumPyro's default single precision (the suite runs in float64, which
    JAX fixes at start-up, so they run in a fresh interpreter): float32 draws, and the posterior
    checks as in float64."""
    import json
    import os
    import subprocess
    import sys

    folder = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(folder))
    tests = os.path.dirname(folder)
    script = FLOAT32_SCRIPT.format(folder=folder, tests=tests, root=root, pairs=list(pairs))
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=root
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads(completed.stdout.strip().splitlines()[-1])
    for pair, result in results.items():
        assert result["dtypes"] in (["float32"], ["int32"], ["float32", "int32"]), result
        assert_right_or_warned(result["failures"], result["warnings"], f"{pair} in float32")
