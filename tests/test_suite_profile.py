"""The default suite is reproducible: property tests run derandomized, with no example database to carry state
between runs (tests/conftest.py registers the profiles; HYPOTHESIS_PROFILE=explore opts into random search), and
the tests run in file order unless a random order is asked for."""

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


def test_test_order_is_the_file_order_unless_random_order_is_asked(pytestconfig, root):
    """pytest-randomly is installed (the dev extra) but off by default (pyproject.toml's addopts); ./run_tests.sh
    turns it on, with a printed seed, when CHUNKSTUDY_RANDOM_ORDER is set, as .ci/run's second pass does."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    addopts = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert "-p no:randomly" in addopts
    if os.environ.get("CHUNKSTUDY_RANDOM_ORDER"):
        assert pytestconfig.pluginmanager.hasplugin("randomly")
        assert isinstance(pytestconfig.getoption("randomly_seed"), int)
