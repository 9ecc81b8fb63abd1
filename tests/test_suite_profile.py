"""The default suite is reproducible: property tests run derandomized, with no example database to carry state
between runs (tests/conftest.py registers the profiles; HYPOTHESIS_PROFILE=explore opts into random search)."""

import os

import pytest
from hypothesis import settings


@pytest.mark.skipif(os.environ.get("HYPOTHESIS_PROFILE", "default") != "default",
                    reason="an exploring profile was chosen with HYPOTHESIS_PROFILE")
def test_default_profile_is_derandomized_without_a_database():
    current = settings()
    assert current.derandomize is True
    assert current.database is None
    assert current.deadline is None


def test_explore_profile_is_registered_and_random():
    explore = settings.get_profile("explore")
    assert explore.derandomize is False
    assert explore.database is None
