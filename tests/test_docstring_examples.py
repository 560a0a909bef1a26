"""Every public name has an example in its docstring, and the examples are real code.

The cheap examples (building objects, tiny computations) are executed. Those that sample, anneal
or train take seconds to minutes each, too long for the suite; they are listed in ``NOT_RUN``
with the reason, and only compiled and checked to name public objects that exist.
"""

import ast
import inspect
import re
import textwrap

import pytest

import numpyro_extras as nx

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


def test_the_not_run_list_names_public_objects():
    assert set(NOT_RUN) <= set(nx.__all__), set(NOT_RUN) - set(nx.__all__)


@pytest.mark.parametrize("name", nx.__all__)
def test_example_compiles_and_names_public_objects(name):
    public = set(nx.__all__)
    for code in examples(getattr(nx, name)):
        tree = ast.parse(code, filename=f"<example of nx.{name}>")
        assigned = {
            node.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
        } | {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "nx"
            ):
                assert node.attr in public, f"the example of nx.{name} uses nx.{node.attr}"
            if isinstance(node, ast.Name) and node.id in public and node.id not in assigned:
                raise AssertionError(f"the example of nx.{name} should write nx.{node.id}")


@pytest.mark.parametrize("name", [name for name in nx.__all__ if name not in NOT_RUN])
def test_cheap_example_runs(name):
    namespace = {}
    exec(compile(PREAMBLE, "<preamble>", "exec"), namespace)
    for code in examples(getattr(nx, name)):
        exec(compile(code, f"<example of nx.{name}>", "exec"), namespace)
