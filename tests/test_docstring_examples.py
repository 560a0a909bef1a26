"""Every public name has an example in its docstring, and every example runs.

The cheap examples (building objects, tiny computations) run in the test suite with the
preamble's imports. Those that sample, anneal, train or read a finished run take seconds to a
minute each; they are listed in ``SLOW`` and ``TARGETS_SLOW`` (for the functions and
classes of ``numpyro_extras.targets``) with the reason, are marked ``slow_example``, which the
suite deselects, and run in a CI step of their own: ``pytest -m slow_example
tests/test_docstring_examples.py``. Besides the preamble, a slow example may assume the names
of ``example_context`` (the API reference's introduction lists them):

- ``model``, ``x``, ``y``: a regression ``model(x, y=None)`` with two posterior modes, and its
  data;
- ``rng_key``: a random key;
- ``mcmc``: a finished run of ``nx.JointContinuousTempering(model)``;
- ``exchange_mcmc``: a finished run of ``nx.ReplicaExchange(model)``;
- ``params``: an involution trained by ``nx.train_ai_sampler`` for ``model``;
- ``proposal``: a VAE proposal trained by ``nx.fit_vae_proposal`` for ``model``;
- ``machine``: a small Boltzmann machine, ``nx.random_rbm``.

Each is built on first use and shared by the examples after it. The constants of
``numpyro_extras.targets`` are described in their module's docstring.
"""

import ast
import inspect
import re
import tomllib
from pathlib import Path

import example_context
import jax
import matplotlib.pyplot as plt
import pytest
from example_context import examples
from jax.experimental.compilation_cache import compilation_cache as compilation_cache_module

import numpyro_extras as nx
from numpyro_extras import targets

_RUN = "runs MCMC"
_FINISHED_RUN = "reads a finished run (mcmc or exchange_mcmc)"
_TRAINS = "trains a network"
_TRAINED = "reads a trained proposal (params or proposal)"
_ANNEALS = "runs annealed importance sampling"
_FITS = "fits a base by variational inference"
_COMPILES = "evaluates a JAX function whose compilation takes a second or more"

# The examples of the slow step, with the reason each is there.
SLOW = {
    "bridge_evidence": _COMPILES,
    "bridge_sampling": _RUN,
    "AiSampler": _TRAINS,
    "AiState": _RUN,
    "ACS": _RUN,
    "ACSState": _RUN,
    "GibbsContinuousTempering": _RUN,
    "JointContinuousTempering": _RUN,
    "ReplicaExchange": _RUN,
    "SLMCState": _RUN,
    "VAESLMC": _RUN,
    "IsometryWarning": _RUN,
    "AnnealingStalledWarning": _TRAINS,
    "Evidence": _FINISHED_RUN,
    "TemperingState": _FINISHED_RUN,
    "log_marginal_likelihood": _FINISHED_RUN,
    "compare": _FINISHED_RUN,
    "plot_compare": _FINISHED_RUN,
    "exchange_diagnostics": _FINISHED_RUN,
    "ExchangeDiagnostics": _FINISHED_RUN,
    "plot_exchange": _FINISHED_RUN,
    "posterior_samples": _FINISHED_RUN,
    "refit_base": _FINISHED_RUN,
    "tempering_diagnostics": _FINISHED_RUN,
    "TemperingDiagnostics": _FINISHED_RUN,
    "base_moment_check": _FINISHED_RUN,
    "BaseMomentCheck": _FINISHED_RUN,
    "plot_tempering": _FINISHED_RUN,
    "target_log_weights": _FINISHED_RUN,
    "tempered_samples": _FINISHED_RUN,
    "to_inference_data": _FINISHED_RUN,
    "train_ai_sampler": _TRAINS,
    "fit_vae_proposal": _TRAINS,
    "InvolutiveProposal": _TRAINED,
    "VAEProposal": _TRAINED,
    "AnnealingHistory": _TRAINED,
    "plot_annealing": _TRAINED,
    "involution_check": _TRAINED,
    "InvolutionCheck": _TRAINED,
    "plot_ai_sampler": _TRAINED,
    "save_involution": _TRAINED,
    "load_involution": _TRAINED,
    "save_proposal": _TRAINED,
    "load_proposal": _TRAINED,
    "isometry_factors": _TRAINED,
    "ais": _ANNEALS,
    "batched_ais": _ANNEALS,
    "ais_boltzmann": _ANNEALS,
    "marginalized_ais_boltzmann": _ANNEALS,
    "mais_vs_ais": _ANNEALS,
    "BoltzmannComparison": _ANNEALS,
    "ising_model": _ANNEALS,
    "rbm_model": _ANNEALS,
    "fit_base": _FITS,
    "BaseCoverageWarning": _FITS,
    "ModeSearchWarning": _FITS,
}

# The targets' functions and classes (their examples import them from numpyro_extras.targets).
TARGETS = [
    name
    for name in targets.__all__
    if inspect.isfunction(getattr(targets, name)) or inspect.isclass(getattr(targets, name))
]

TARGETS_SLOW = {
    "bimodal_model": _RUN,
    "boltzmann_relaxation_model": _RUN,
    "gaussian_mixture_model": _RUN,
    "linear_regression_model": _RUN,
    "multimodal_grid_model": _RUN,
    "radon_model": _RUN,
    "radon_log_marginal_likelihood": "integrates over a grid of about 110,000 points (a minute)",
    "sign_product_model": _RUN,
    "logistic_regression_model": _ANNEALS,
    "boltzmann_relaxation_potential": _COMPILES,
    "gaussian_model": _COMPILES,
    "make_multimodal_grid": _COMPILES,
    "multimodal_grid_log_density": _COMPILES,
    "multimodal_grid_probabilities": _COMPILES,
}


def test_every_public_name_has_an_example():
    missing = [name for name in nx.__all__ if not examples(getattr(nx, name))]
    assert not missing, f"public names without a docstring example: {missing}"


def test_every_target_has_an_example():
    missing = [name for name in TARGETS if not examples(getattr(targets, name))]
    assert not missing, f"targets without a docstring example: {missing}"


def test_the_slow_lists_name_public_objects():
    assert set(SLOW) <= set(nx.__all__), set(SLOW) - set(nx.__all__)
    assert set(TARGETS_SLOW) <= set(TARGETS), set(TARGETS_SLOW) - set(TARGETS)


def check_names(code, label):
    """Parse an example; every ``nx.X`` must be public, and a public name of ``nx`` used bare
    must be written ``nx.X``; names imported from ``numpyro_extras.targets`` (or one of its
    modules) must be public targets."""
    public = set(nx.__all__)
    tree = ast.parse(code, filename=f"<example of {label}>")
    assigned = {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    } | {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "nx":
                assert node.attr in public, f"the example of {label} uses nx.{node.attr}"
        if isinstance(node, ast.Name) and node.id in public and node.id not in assigned:
            raise AssertionError(f"the example of {label} should write nx.{node.id}")
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(targets.__name__):
            for alias in node.names:
                assert alias.name in targets.__all__, (
                    f"the example of {label} imports {alias.name}, not a public target"
                )


@pytest.mark.parametrize("name", nx.__all__)
def test_example_compiles_and_names_public_objects(name):
    for code in examples(getattr(nx, name)):
        check_names(code, f"nx.{name}")


@pytest.mark.parametrize("name", TARGETS)
def test_target_example_compiles_and_names_public_objects(name):
    for code in examples(getattr(targets, name)):
        check_names(code, f"targets.{name}")


# Every example by label ("nx.X" or "targets.X"), and those of the slow step.
EXAMPLES = {f"nx.{name}": getattr(nx, name) for name in nx.__all__} | {
    f"targets.{name}": getattr(targets, name) for name in TARGETS
}
SLOW_EXAMPLES = [f"nx.{name}" for name in SLOW] + [f"targets.{name}" for name in TARGETS_SLOW]
CHEAP_EXAMPLES = [label for label in EXAMPLES if label not in SLOW_EXAMPLES]


def test_every_example_runs_in_one_of_the_two_steps():
    assert set(CHEAP_EXAMPLES) | set(SLOW_EXAMPLES) == set(EXAMPLES)
    assert not set(CHEAP_EXAMPLES) & set(SLOW_EXAMPLES)
    # The slow step exists: the suite deselects its marker and CI selects it.
    root = Path(__file__).resolve().parents[1]
    pytest_config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"]
    assert "not slow_example" in pytest_config["ini_options"]["addopts"]
    assert re.search(
        r"pytest .*-m slow_example .*test_docstring_examples", (root / ".ci/run").read_text()
    )


@pytest.mark.parametrize("label", SLOW_EXAMPLES)
def test_slow_example_assumes_only_context_names(label):
    unknown = example_context.context_names(EXAMPLES[label]) - set(example_context.NAMES)
    assert not unknown, f"the example of {label} uses undefined names: {sorted(unknown)}"


@pytest.mark.parametrize("label", CHEAP_EXAMPLES)
def test_cheap_example_runs(label):
    assert not example_context.context_names(EXAMPLES[label]), "the suite runs it without context"
    example_context.run_examples(EXAMPLES[label], label)


@pytest.fixture(scope="session")
def compilation_cache(tmp_path_factory):
    """A persistent compilation cache for the slow step: its examples and context compile the
    same functions again and again (each kernel builds new closures), and XLA compilation is
    most of their time."""
    jax.config.update("jax_compilation_cache_dir", str(tmp_path_factory.mktemp("jax_cache")))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    compilation_cache_module.reset_cache()  # JAX decides whether to use it at its first compile
    yield
    jax.config.update("jax_compilation_cache_dir", None)
    compilation_cache_module.reset_cache()


def _worker_group(label):
    """Two groups of slow examples, one per pytest-xdist worker (``--dist loadgroup``), each
    sharing its own context objects: the learned proposals, annealing and discrete sampling, and
    the rest (tempering, replica exchange, the targets)."""
    module = EXAMPLES[label].__module__
    learned = ("involutive", "slmc", "annealing", "discrete")
    return "learned" if module.split(".")[1] in learned else "tempering"


@pytest.mark.slow_example
@pytest.mark.parametrize(
    "label",
    [
        pytest.param(label, marks=pytest.mark.xdist_group(_worker_group(label)))
        for label in SLOW_EXAMPLES
    ],
)
def test_slow_example_runs(label, compilation_cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # for the files the examples write
    try:
        example_context.run_examples(EXAMPLES[label], label)
    finally:
        plt.close("all")
