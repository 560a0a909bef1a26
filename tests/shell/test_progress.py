import jax
import jax.numpy as jnp
import numpy as np
import pytest

from numpyro_extras.shell.progress import scan_in_chunks


@pytest.mark.parametrize("length", [1, 7, 30, 657])
def test_scan_in_chunks_is_the_whole_scan(length):
    def transition(carry, _):
        total, key = carry
        key, draw_key = jax.random.split(key)
        step = jax.random.normal(draw_key, (2,))
        return (total + step, key), (total, step)

    carry = (jnp.zeros(2), jax.random.PRNGKey(0))
    expected_carry, expected = jax.lax.scan(transition, carry, None, length=length)
    chunked_carry, chunked = scan_in_chunks(
        transition, carry, length, description="test", progress_bar=False
    )
    assert chunked[0].shape == (length, 2) and isinstance(chunked[0], np.ndarray)
    np.testing.assert_allclose(chunked[0], expected[0], rtol=1e-6)
    np.testing.assert_array_equal(chunked[1], expected[1])
    np.testing.assert_allclose(chunked_carry[0], expected_carry[0], rtol=1e-6)
