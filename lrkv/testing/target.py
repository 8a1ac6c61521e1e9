"""Which backend a check runs, and the `--backend` value that replays it.

A user may hand `check_backend` an object, a class, a registered name or a
`package.module:attribute` path. Reports and replay commands need a string that
`lrkv verify --backend` resolves again, so an object is named by where it lives: an explicit
`backend_ref`, else the module attribute that holds it, else its class's module:qualname.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from ..verify.backend_registry import get_backend


@dataclass(frozen=True)
class Target:
    """A backend object and the label (`--backend` value) that replays it."""

    label: str
    backend: Any
    resolvable: bool  # whether `label` imports again from this process's sys.path
    note: str = ""  # why not, when it does not


def _attribute_path(obj: Any) -> str | None:
    """module:attr of a module-level attribute that *is* obj (an instance or a class)."""
    cls = obj if isinstance(obj, type) else type(obj)
    for modname in dict.fromkeys((getattr(obj, "__module__", None), cls.__module__)):
        mod = sys.modules.get(modname or "")
        if mod is None or modname == "__main__":
            continue
        for attr, value in vars(mod).items():
            if value is obj and not attr.startswith("_"):
                return f"{modname}:{attr}"
    if "<locals>" not in cls.__qualname__ and cls.__module__ not in ("__main__", "builtins"):
        return f"{cls.__module__}:{cls.__qualname__}"  # a class: the registry instantiates it
    return None


def resolve(backend: Any, backend_ref: str | None = None) -> Target:
    """A Target for a name, a module:attr path, a class or an object (see the module doc)."""
    if backend_ref is not None and not isinstance(backend_ref, str):
        raise TypeError(f"backend_ref must be a 'package.module:attribute' string, got {type(backend_ref).__name__}")
    if isinstance(backend, str):
        return Target(backend_ref or backend, get_backend(backend), True)
    obj = get_backend_object(backend)
    label = backend_ref or _attribute_path(backend)
    if label is None:
        return Target(f"<{obj.name}>", obj, False,
                      f"backend {obj.name!r} is not a module attribute; pass backend_ref='package.module:attribute'")
    try:
        get_backend(label)
    except (ValueError, TypeError, ImportError) as e:
        return Target(label, obj, False, f"replay label {label!r} does not resolve: {e}")
    return Target(label, obj, True)


def get_backend_object(backend: Any) -> Any:
    """Instantiate a class or factory and check the protocol, as `--backend` does."""
    from ..verify.protocol import instantiate

    return instantiate(backend, getattr(backend, "name", None) or repr(backend))
