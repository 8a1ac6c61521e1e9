"""Fixtures of the compiled-engine tests."""

import pytest

from lrkv.compiled import engine


@pytest.fixture(autouse=True, scope="module")
def _quiet():
    """No progress lines on stderr while these tests build and verify engines."""
    before, engine.QUIET = engine.QUIET, True
    yield
    engine.QUIET = before
