"""quick_jit: the same values as jax.jit, in every way jax.jit is called, inside a trace too;
its options leave what the user set through XLA_FLAGS alone."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from numpyro_extras.shell import compilation
from numpyro_extras.shell.compilation import (
    fold_in_key,
    quick_compiler_options,
    quick_jit,
    split_each_key,
    split_key,
)


def polynomial(x, power):
    return jnp.sum(x**power) + jnp.sin(x).sum()


def test_values_match_jax_jit_as_a_call_and_as_decorators():
    x = jnp.linspace(-1.0, 2.0, 7)
    expected = jax.jit(polynomial, static_argnums=1)(x, 3)
    assert quick_jit(polynomial, static_argnums=1)(x, 3) == pytest.approx(float(expected))

    @quick_jit
    def squared_norm(x):
        return jnp.sum(x**2)

    @functools.partial(quick_jit, static_argnames="power", optimize=True)
    def powered(x, power):
        return polynomial(x, power)

    assert float(squared_norm(x)) == pytest.approx(float(jnp.sum(x**2)))
    assert float(powered(x, power=3)) == pytest.approx(float(expected))
    assert squared_norm.__name__ == "squared_norm"


def test_a_call_inside_another_trace_compiles_with_the_outer_program():
    inner = quick_jit(polynomial, static_argnums=1)
    x = jnp.arange(3.0)
    outer = jax.jit(lambda x: inner(x, 2) + 1.0)
    assert float(outer(x)) == pytest.approx(float(polynomial(x, 2)) + 1.0)
    assert float(jax.grad(lambda x: inner(x, 2))(1.5)) == pytest.approx(3.0 + np.cos(1.5))


def test_lowering_is_available():
    lowered = quick_jit(polynomial, static_argnums=1).lower(jnp.ones(3), 2)
    assert "sine" in lowered.as_text()


def test_options_on_cpu_and_those_the_user_set(monkeypatch):
    assert jax.default_backend() == "cpu"
    try:
        quick_compiler_options.cache_clear()
        monkeypatch.setenv("XLA_FLAGS", "")
        options = quick_compiler_options()
        assert options["xla_backend_optimization_level"] == 0
        assert options["xla_cpu_multi_thread_eigen"] is False
        assert "xla_backend_optimization_level" not in quick_compiler_options(optimize=True)
        # an int is an LLVM level; True, though equal to 1, is XLA's default level
        assert quick_compiler_options(optimize=1)["xla_backend_optimization_level"] == 1
        assert "xla_backend_optimization_level" not in quick_compiler_options(optimize=True)
        assert quick_compiler_options(optimize=0)["xla_backend_optimization_level"] == 0
        quick_compiler_options.cache_clear()
        monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=2")
        assert "xla_backend_optimization_level" not in quick_compiler_options()
    finally:
        quick_compiler_options.cache_clear()


def test_a_program_compiled_at_an_llvm_level_gives_the_same_values():
    x = jnp.linspace(-1.0, 1.0, 7)
    at_level_one = quick_jit(polynomial, optimize=1, static_argnums=1)(x, 3)
    np.testing.assert_allclose(at_level_one, polynomial(x, 3), rtol=1e-12)


def test_release_parsing():
    assert compilation._release("0.12.0.1") == (0, 12)
    assert compilation._release("0.10.2") == (0, 10)
    assert compilation._release("1.0rc1") == (1, 0)


def test_key_functions_match_jax_random():
    key = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(split_key(key, 5), jax.random.split(key, 5))
    keys = jax.random.split(key, 4)
    np.testing.assert_array_equal(split_each_key(keys), jax.vmap(jax.random.split)(keys))
    np.testing.assert_array_equal(fold_in_key(key, 7), jax.random.fold_in(key, 7))
