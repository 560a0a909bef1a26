"""The numerics of the base fit that run no sampler: the polish of the fits Adam left
unsettled."""

import numpy as np

from numpyro_extras.model.base_fit import polish_flagged


def test_only_the_flagged_fits_are_polished():
    """Polishing costs a Hessian per draw and step: the unflagged fits are neither polished nor
    changed, and each flagged one is polished once."""
    params = (np.arange(8.0).reshape(4, 2), np.ones((4, 2)))
    calls = []

    def polish_one(fit_params):
        calls.append(np.asarray(fit_params[0]).copy())
        return (fit_params[0] + 10.0, fit_params[1] * 2.0), -1.5, True

    flags = np.array([False, True, False, True])
    polished, check_elbos, improved = polish_flagged(polish_one, params, flags)
    np.testing.assert_array_equal(np.stack(calls), params[0][[1, 3]])
    np.testing.assert_array_equal(polished[0][[0, 2]], params[0][[0, 2]])
    np.testing.assert_array_equal(polished[0][[1, 3]], params[0][[1, 3]] + 10.0)
    np.testing.assert_array_equal(polished[1][:, 0], [1.0, 2.0, 1.0, 2.0])
    np.testing.assert_array_equal(check_elbos, [-np.inf, -1.5, -np.inf, -1.5])
    np.testing.assert_array_equal(improved, flags)
    assert polished[0] is not params[0]  # the caller's arrays are left as they were
