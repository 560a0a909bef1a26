"""Every public name has an example in its docstring, and the examples are real code.

The cheap examples (building objects, tiny computations) are executed. Those that sample, anneal
or train take seconds to minutes each, too long for the suite; they are listed in ``NOT_RUN``
with the reason, and only compiled and checked to name public objects that exist. The same holds
for the functions and classes of ``numpyro_extras.targets`` (``TARGETS_NOT_RUN``); its constants
are described in their module's docstring.
"""

import ast
import inspect
import re
import textwrap

import pytest

import numpyro_extras as nx
from numpyro_extras import targets

# What every example may assume, as the API reference's introduction says.
PREAMBLE = """\
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import HMC, MCMC, NUTS, Predictive

import numpyro_extras as nx
"""

_RUN = "runs MCMC on a user's model"
_FINISHED_RUN = "reads a finished MCMC run (mcmc) of a user's model"
_TRAINS = "trains a network"
_TRAINED = "needs a trained proposal or one saved to a file"
_ANNEALS = "runs annealed importance sampling"
_FITS = "fits a base by variational inference on a user's model"
_COMPILES = "evaluates a JAX function whose compilation takes a second or more"

NOT_RUN = {
    "AiSampler": _RUN,
    "AiState": _RUN,
    "ACS": _RUN,
    "ACSState": _RUN,
    "GibbsContinuousTempering": _RUN,
    "JointContinuousTempering": _RUN,
    "TemperingState": _RUN,
    "ReplicaExchange": _RUN,
    "log_marginal_likelihood": _RUN,
    "VAESLMC": _RUN,
    "SLMCState": _RUN,
    "IsometryWarning": _RUN,
    "Evidence": _FINISHED_RUN,
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
    "InvolutiveProposal": _TRAINS,
    "fit_vae_proposal": _TRAINS,
    "VAEProposal": _TRAINS,
    "AnnealingHistory": _TRAINS,
    "AnnealingSettings": _TRAINS,
    "plot_annealing": _TRAINS,
    "involution_check": _TRAINED,
    "InvolutionCheck": _TRAINED,
    "plot_ai_sampler": _TRAINED,
    "save_involution": _TRAINED,
    "load_involution": _TRAINED,
    "save_proposal": _TRAINED,
    "load_proposal": _TRAINED,
    "isometry_factors": _TRAINED,
    "ais": _ANNEALS,
    "ais_boltzmann": _ANNEALS,
    "marginalized_ais_boltzmann": _ANNEALS,
    "mais_vs_ais": _ANNEALS,
    "BoltzmannComparison": _ANNEALS,
    "ising_model": _ANNEALS,
    "rbm_model": _ANNEALS,
    "fit_base": _FITS,
    "BaseCoverageWarning": _FITS,
}

# The targets' functions and classes (their examples import them from numpyro_extras.targets).
TARGETS = [
    name
    for name in targets.__all__
    if inspect.isfunction(getattr(targets, name)) or inspect.isclass(getattr(targets, name))
]

TARGETS_NOT_RUN = {
    "bimodal_model": _RUN,
    "boltzmann_relaxation_model": _RUN,
    "gaussian_mixture_model": _RUN,
    "linear_regression_model": _RUN,
    "multimodal_grid_model": _RUN,
    "radon_model": _RUN,
    "sign_product_model": _RUN,
    "logistic_regression_model": _ANNEALS,
    "boltzmann_relaxation_potential": _COMPILES,
    "gaussian_model": _COMPILES,
    "make_multimodal_grid": _COMPILES,
    "multimodal_grid_log_density": _COMPILES,
    "multimodal_grid_probabilities": _COMPILES,
}

_CODE_BLOCK = re.compile(r"^(?P<indent>[ \t]*)\.\. code-block:: python[ \t]*$")


def examples(obj):
    """The Python code blocks (``.. code-block:: python`` or ``>>>``) of a docstring."""
    lines = (inspect.getdoc(obj) or "").splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        match = _CODE_BLOCK.match(lines[i])
        if match:
            indent = len(match.group("indent"))
            body = []
            i += 1
            while i < len(lines) and (
                not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent
            ):
                body.append(lines[i])
                i += 1
            blocks.append(textwrap.dedent("\n".join(body)).strip() + "\n")
        elif lines[i].lstrip().startswith(">>>"):
            body = []
            while i < len(lines) and lines[i].lstrip().startswith((">>>", "...")):
                body.append(lines[i].lstrip()[4:])
                i += 1
            blocks.append("\n".join(body) + "\n")
        else:
            i += 1
    return blocks


def test_every_public_name_has_an_example():
    missing = [name for name in nx.__all__ if not examples(getattr(nx, name))]
    assert not missing, f"public names without a docstring example: {missing}"


def test_every_target_has_an_example():
    missing = [name for name in TARGETS if not examples(getattr(targets, name))]
    assert not missing, f"targets without a docstring example: {missing}"


def test_the_not_run_list_names_public_objects():
    assert set(NOT_RUN) <= set(nx.__all__), set(NOT_RUN) - set(nx.__all__)
    assert set(TARGETS_NOT_RUN) <= set(TARGETS), set(TARGETS_NOT_RUN) - set(TARGETS)


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


@pytest.mark.parametrize("name", [name for name in nx.__all__ if name not in NOT_RUN])
def test_cheap_example_runs(name):
    namespace = {}
    exec(compile(PREAMBLE, "<preamble>", "exec"), namespace)
    for code in examples(getattr(nx, name)):
        exec(compile(code, f"<example of nx.{name}>", "exec"), namespace)


@pytest.mark.parametrize("name", [name for name in TARGETS if name not in TARGETS_NOT_RUN])
def test_cheap_target_example_runs(name):
    namespace = {}
    exec(compile(PREAMBLE, "<preamble>", "exec"), namespace)
    for code in examples(getattr(targets, name)):
        exec(compile(code, f"<example of targets.{name}>", "exec"), namespace)
