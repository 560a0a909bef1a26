"""nx.batched_ais: one model over many data sets, each estimate against its closed-form log Z
(a conjugate regression), the problems flagged per data set, every data set's estimate the same
whatever the blocks, and bad input refused with the reason."""

import warnings

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from scipy.stats import multivariate_normal

import numpyro_extras as nx

PRIOR_SCALE, NOISE_SCALE, NUM_POINTS, NUM_DATA_SETS = 2.0, 0.5, 10, 16


def regression(x, y):
    coefficients = numpyro.sample(
        "coefficients", dist.Normal(0.0, PRIOR_SCALE).expand([2]).to_event(1)
    )
    with numpyro.plate("data", x.shape[-1]):
        numpyro.sample("y", dist.Normal(coefficients[0] + coefficients[1] * x, NOISE_SCALE), obs=y)


def exact_log_z(x, y):
    """``log N(y; 0, s^2 I + t^2 A A^T)``, the regression's marginal likelihood."""
    design = np.stack([np.ones_like(x), x], axis=1)
    covariance = NOISE_SCALE**2 * np.eye(len(x)) + PRIOR_SCALE**2 * design @ design.T
    return multivariate_normal(np.zeros(len(x)), covariance).logpdf(y)


@pytest.fixture(scope="module")
def data_sets():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(NUM_DATA_SETS, NUM_POINTS))
    slopes = rng.normal(0.0, 1.5, size=(NUM_DATA_SETS, 1))
    y = 0.3 + slopes * x + NOISE_SCALE * rng.normal(size=x.shape)
    return x, y, np.array([exact_log_z(x[i], y[i]) for i in range(NUM_DATA_SETS)])


@pytest.fixture(scope="module")
def fitted_base_run(data_sets):
    x, y, _ = data_sets
    return nx.batched_ais(
        jax.random.PRNGKey(1),
        regression,
        (x, y),
        num_particles=200,
        num_temperatures=60,
        progress_bar=False,
    )


def test_each_estimate_matches_its_data_sets_log_z(data_sets, fitted_base_run):
    _, _, truth = data_sets
    assert len(fitted_base_run) == NUM_DATA_SETS
    for evidence, log_z in zip(fitted_base_run, truth, strict=True):
        assert evidence.problems == ()
        # The Gaussian base is close to the Gaussian posterior: a tight estimate.
        assert 0 < evidence.stderr < 0.01
        assert abs(evidence.log_z - log_z) < 4 * evidence.stderr


def prior_path_run(x, y):
    """``(evidences, batched_ais warnings)`` of a run from the prior."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        evidences = nx.batched_ais(
            jax.random.PRNGKey(2),
            regression,
            (x, y),
            num_particles=200,
            num_temperatures=60,
            base="prior",
            progress_bar=False,
        )
    return evidences, [str(w.message) for w in caught if "batched_ais" in str(w.message)]


@pytest.fixture(scope="module")
def prior_run(data_sets):
    x, y, _ = data_sets
    return prior_path_run(x, y)


def test_from_the_prior_each_estimate_is_right_or_flagged(data_sets, prior_run):
    _, _, truth = data_sets
    evidences, messages = prior_run
    flagged = [index for index, evidence in enumerate(evidences) if evidence.problems]
    # One warning for the whole run, naming the flagged data sets; none when nothing is flagged.
    assert len(messages) == (1 if flagged else 0)
    if flagged:
        assert f"data sets {flagged[0]}" in messages[0]
    right = 0
    for evidence, log_z in zip(evidences, truth, strict=True):
        if evidence.problems:
            continue
        assert 0 < evidence.stderr < 0.5
        assert abs(evidence.log_z - log_z) < 4 * evidence.stderr
        right += 1
    assert right >= NUM_DATA_SETS // 2


def test_a_data_set_far_from_the_prior_is_flagged_alone(data_sets, prior_run):
    x, y, _ = data_sets
    # The fourth data set's intercept lies 50 prior standard deviations out: on the path from
    # the prior a handful of particles carry its weight.
    y = y.copy()
    y[3] += 100.0
    evidences, (message,) = prior_path_run(x, y)
    assert evidences[3].problems and np.isfinite(evidences[3].log_z)
    assert any("ESS" in problem for problem in evidences[3].problems)
    assert "data sets 3" in message or ", 3," in message or ", 3;" in message
    # Every other data set's estimate, and its problems, are those of the run without the
    # shifted data set: each data set runs on its own key, apart from the others.
    for index, (evidence, unshifted) in enumerate(zip(evidences, prior_run[0], strict=True)):
        if index != 3:
            assert (evidence.log_z, evidence.stderr) == (unshifted.log_z, unshifted.stderr)
            assert evidence.problems == unshifted.problems


def test_an_estimate_is_the_same_whatever_the_blocks(data_sets, fitted_base_run):
    x, y, _ = data_sets
    # The first six data sets alone, in one block filled up with copies, and stacked along
    # another axis: the same keys, the same program per data set, the same numbers.
    first = nx.batched_ais(
        jax.random.PRNGKey(1),
        regression,
        (x[:6].T, y[:6].T),
        in_axes=1,
        num_particles=200,
        num_temperatures=60,
        progress_bar=False,
    )
    assert [e.log_z for e in first] == [e.log_z for e in fitted_base_run[:6]]
    assert [e.stderr for e in first] == [e.stderr for e in fitted_base_run[:6]]


def test_a_shared_argument_and_a_python_count(data_sets):
    x, y, _ = data_sets

    def model(x, y, num_points):
        coefficients = numpyro.sample(
            "coefficients", dist.Normal(0.0, PRIOR_SCALE).expand([2]).to_event(1)
        )
        with numpyro.plate("data", num_points):
            mean = coefficients[0] + coefficients[1] * x
            numpyro.sample("y", dist.Normal(mean, NOISE_SCALE), obs=y)

    # Four data sets that share their x (in_axes None) and a Python count that sets a shape.
    same_x = np.array([exact_log_z(x[0], y[i]) for i in range(4)])
    evidences = nx.batched_ais(
        jax.random.PRNGKey(4),
        model,
        (x[0], y[:4], NUM_POINTS),
        in_axes=(None, 0, None),
        num_particles=100,
        num_temperatures=30,
        progress_bar=False,
    )
    assert len(evidences) == 4
    for evidence, log_z in zip(evidences, same_x, strict=True):
        assert 0 < evidence.stderr < 0.02
        assert abs(evidence.log_z - log_z) < 4 * evidence.stderr


def test_bad_input_is_refused_with_the_reason(data_sets):
    x, y, _ = data_sets
    settings = dict(num_particles=10, num_temperatures=5, progress_bar=False)
    key = jax.random.PRNGKey(0)
    with pytest.raises(ValueError, match="disagree on the number of data sets: 16 in model_args"):
        nx.batched_ais(key, regression, (x, y[:5]), **settings)
    with pytest.raises(ValueError, match="at least one argument with a data-set axis"):
        nx.batched_ais(key, regression, (x, y), in_axes=None, **settings)
    with pytest.raises(ValueError, match="one entry .* per positional argument"):
        nx.batched_ais(key, regression, (x, y), in_axes=(0,), **settings)
    with pytest.raises(ValueError, match="no axis 2"):
        nx.batched_ais(key, regression, (x, y), in_axes=2, **settings)
    with pytest.raises(ValueError, match="base must be 'auto' or 'prior'"):
        base = nx.GaussianBase(np.zeros(2), np.eye(2), 0.0)
        nx.batched_ais(key, regression, (x, y), base=base, **settings)
    with pytest.raises(TypeError, match="num_particles"):
        nx.batched_ais(key, regression, (x, y), num_particles=10.5, num_temperatures=5)

    def mixture(y):
        component = numpyro.sample("component", dist.Bernoulli(0.5))
        numpyro.sample("y", dist.Normal(2.0 * component, 1.0), obs=y)

    with pytest.raises(ValueError, match="discrete latent sites \\['component'\\].*nx.ais"):
        nx.batched_ais(key, mixture, (y[:, 0],), **settings)


def test_ragged_data_sets_padded_and_masked(data_sets):
    x, y, _ = data_sets
    # Data sets of 4 to 10 points, padded to 10 and masked: each estimate is that of its own
    # points alone.
    lengths = np.array([4, 7, 10, 5])
    mask = np.arange(NUM_POINTS) < lengths[:, None]

    def masked_regression(x, y, mask):
        coefficients = numpyro.sample(
            "coefficients", dist.Normal(0.0, PRIOR_SCALE).expand([2]).to_event(1)
        )
        with numpyro.plate("data", x.shape[-1]), numpyro.handlers.mask(mask=mask):
            mean = coefficients[0] + coefficients[1] * x
            numpyro.sample("y", dist.Normal(mean, NOISE_SCALE), obs=y)

    evidences = nx.batched_ais(
        jax.random.PRNGKey(6),
        masked_regression,
        (x[:4], y[:4], mask),
        num_particles=100,
        num_temperatures=30,
        progress_bar=False,
    )
    for index, (evidence, length) in enumerate(zip(evidences, lengths, strict=True)):
        log_z = exact_log_z(x[index, :length], y[index, :length])
        assert 0 < evidence.stderr < 0.02
        assert abs(evidence.log_z - log_z) < 4 * evidence.stderr
