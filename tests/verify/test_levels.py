"""The level registry: it names every case level, each module's LEVEL is that level, and an
unknown level is refused by name."""

from __future__ import annotations

import pytest

from lrkv.verify.case import CASE_LEVELS, KERNEL_LEVELS
from lrkv.verify.levels import LEVEL_MODULES, get_level


def test_the_registry_names_every_case_level_once():
    assert sorted(LEVEL_MODULES) == sorted(CASE_LEVELS)


@pytest.mark.parametrize("name", CASE_LEVELS)
def test_each_module_implements_its_level(name):
    level = get_level(name)
    assert level.name == name
    assert level.needs == (name if name in KERNEL_LEVELS or name == "layer" else
                           {"layer-model": "layer", "tp": "kernel"}[name])


def test_an_unknown_level_is_refused():
    with pytest.raises(ValueError, match=r"unknown case level 'kernel-fp8'; known: kernel"):
        get_level("kernel-fp8")


def test_a_module_whose_level_is_another_is_refused(monkeypatch):
    monkeypatch.setitem(LEVEL_MODULES, "kernel-paged", "lrkv.verify.levels.kernel")
    with pytest.raises(AssertionError, match="is level 'kernel', registered as 'kernel-paged'"):
        get_level("kernel-paged")
