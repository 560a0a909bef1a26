"""A replica-exchange run shared by the tests of one module."""

import pytest
from exchange_targets import CONJUGATE_DATA, conjugate_model, run

import numpyro_extras as nx


@pytest.fixture(scope="module")
def conjugate_run():
    return run(
        nx.ReplicaExchange(conjugate_model, num_replicas=6, reference="prior"), CONJUGATE_DATA
    )
