"""What a docstring example runs with: the preamble's imports and, for the slow examples, the
context names (the docstring of test_docstring_examples and the API reference's introduction
list them), each built on first use and shared by every example after it.

``model`` is a regression whose slope enters squared, so its posterior has two modes. The
finished runs have the settings of the kernels' own examples, and the trained proposals are
those that the examples of ``nx.train_ai_sampler`` and ``nx.fit_vae_proposal`` train, so that
the context and those examples share their compiled code.
"""

import ast
import builtins
import functools
import inspect
import re
import textwrap

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

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


def model(x, y=None):
    """A regression whose slope enters squared: two posterior modes, slope near -1 and +1."""
    intercept = numpyro.sample("intercept", dist.Normal(0.0, 1.0))
    slope = numpyro.sample("slope", dist.Normal(0.0, 2.0))
    numpyro.sample("y", dist.Normal(intercept + slope**2 * x, 0.5), obs=y)


def _data():
    x = jnp.linspace(-1.0, 1.0, 20)
    return x, 0.5 + x + 0.5 * jax.random.normal(jax.random.PRNGKey(1), x.shape)


def _finished_run(kernel):
    run = MCMC(kernel, num_warmup=300, num_samples=1000, num_chains=2)
    run.run(jax.random.PRNGKey(0), build("x"), build("y"))
    return run


_BUILDERS = {
    "model": lambda: model,
    "x": lambda: _data()[0],
    "y": lambda: _data()[1],
    "rng_key": lambda: jax.random.PRNGKey(0),
    "mcmc": lambda: _finished_run(nx.JointContinuousTempering(model)),
    "exchange_mcmc": lambda: _finished_run(nx.ReplicaExchange(model, num_replicas=8)),
    "params": lambda: run_examples(nx.train_ai_sampler, "nx.train_ai_sampler")["params"],
    "proposal": lambda: run_examples(nx.fit_vae_proposal, "nx.fit_vae_proposal")["proposal"],
    "machine": lambda: nx.random_rbm(jax.random.PRNGKey(0), 5, 5),
}
NAMES = tuple(_BUILDERS)


@functools.cache
def build(name):
    """The context object ``name``, built on first use and shared by every example after."""
    return _BUILDERS[name]()


def _preamble_names():
    namespace = {}
    exec(compile(PREAMBLE, "<preamble>", "exec"), namespace)
    return set(namespace)


PREAMBLE_NAMES = _preamble_names()


def context_names(obj):
    """The context names the examples of ``obj`` read without defining them."""
    return set().union(*map(free_names, examples(obj))) - PREAMBLE_NAMES


def run_examples(obj, label):
    """Run the examples of ``obj`` after the preamble, with the context names they read;
    return their namespace."""
    namespace = {name: build(name) for name in context_names(obj)}
    exec(compile(PREAMBLE, "<preamble>", "exec"), namespace)
    for code in examples(obj):
        exec(compile(code, f"<example of {label}>", "exec"), namespace)
    return namespace


def free_names(code):
    """The names an example reads before it defines them, imports or finds them in builtins."""
    tree = ast.parse(code)
    # Where each name is first defined: an assignment defines its targets after its value runs.
    defined = {}
    for statement in ast.walk(tree):
        if isinstance(statement, ast.FunctionDef | ast.ClassDef):
            names = [statement.name]
        elif isinstance(statement, ast.Import | ast.ImportFrom):
            names = [(alias.asname or alias.name).split(".")[0] for alias in statement.names]
        elif isinstance(statement, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.For):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(statement, ast.With):
            names = [
                n.id
                for item in statement.items
                if item.optional_vars is not None
                for n in ast.walk(item.optional_vars)
                if isinstance(n, ast.Name)
            ]
        elif isinstance(statement, ast.ExceptHandler) and statement.name:
            names = [statement.name]
        elif isinstance(statement, ast.arg):
            names = [statement.arg]
        elif isinstance(statement, ast.comprehension):
            # Local to its comprehension, where it is defined before it is read.
            for node in ast.walk(statement.target):
                if isinstance(node, ast.Name):
                    defined[node.id] = (0, 0)
            continue
        else:
            continue
        position = (statement.end_lineno, statement.end_col_offset)
        if isinstance(statement, ast.With | ast.For | ast.ExceptHandler | ast.FunctionDef):
            position = (statement.lineno, statement.col_offset)
        for name in names:
            defined[name] = min(defined.get(name, position), position)
    return {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name)
        and isinstance(node.ctx, ast.Load)
        and not hasattr(builtins, node.id)
        and (node.lineno, node.col_offset) < defined.get(node.id, (float("inf"), 0))
    }
