"""Input validation at the boundary: one helper per kind of value.

Every public entry point (spec constructors, `Case`, the tolerance policy, the accounting
functions, each CLI verb) validates its inputs with these helpers, once, before any work
starts. Each raises `TypeError` (wrong kind) or `ValueError` (wrong value) whose message
starts with the field's name, so a user sees *which* input is bad — never a silent
coercion (a float length truncated, the string "no" read as true) and never a traceback
from deep inside torch.

The `arg_*` wrappers turn the same checks into argparse `type=` converters, so a bad
command-line value exits 2 with the option named (DESIGN §7 exit codes).
"""

from __future__ import annotations

import argparse
import json
import math
import numbers
import operator
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "check_bool", "check_int", "check_float", "check_choice", "check_out_dir", "check_out_file",
    "check_in_file", "check_nesting", "parse_json", "parse_toml", "arg_int", "arg_float", "arg_out_dir",
    "arg_out_file", "arg_in_file",
]

MAX_NESTING = 100  # levels of arrays/objects/tables in a JSON or TOML file (lrkv's own are < 10 deep)


def check_bool(name: str, value: Any) -> bool:
    """A real bool. Strings such as "no"/"off" and ints are refused, not read as truthy."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True/False), got {type(value).__name__} {value!r}")
    return value


def check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """An integer (int or numpy/torch integer scalar; never a bool, float or string).

    A float such as 1.5 — or even 2.0 — is refused: truncating it would silently verify a
    different case than the one asked for.
    """
    if isinstance(value, (bool, float, str, bytes)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}") from None
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {v}")
    return v


def check_float(name: str, value: Any, *, minimum: float | None = None, maximum: float | None = None,
                exclusive_minimum: bool = False) -> float:
    """A finite real number (int or float; never a bool or string); inf and NaN are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    if minimum is not None:
        if exclusive_minimum and not v > minimum:
            raise ValueError(f"{name} must be > {minimum:g}, got {v:g}")
        if not exclusive_minimum and not v >= minimum:
            raise ValueError(f"{name} must be >= {minimum:g}, got {v:g}")
    if maximum is not None and not v <= maximum:
        raise ValueError(f"{name} must be <= {maximum:g}, got {v:g}")
    return v


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """One of a fixed set of values."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value


def _first_existing_parent(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_out_dir(name: str, value: Any) -> Path:
    """A directory that exists or can be created: no file stands at it or at any parent."""
    if isinstance(value, str) and not value.strip():  # Path("") is the current folder: say so, never guess
        raise ValueError(f"{name}: an empty path (give . for the current folder)")
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{name}: {path} exists and is not a directory")
    parent = _first_existing_parent(path)
    if not parent.is_dir():
        raise ValueError(f"{name}: cannot create {path}: {parent} is a file, not a directory")
    return path


def check_out_file(name: str, value: Any) -> Path:
    """A file path that can be written: not a directory, and its folder exists or can be made."""
    path = Path(value)
    if path.is_dir():
        raise ValueError(f"{name}: {path} is a directory, expected a file path")
    check_out_dir(name, path.parent if str(path.parent) else ".")
    return path


def check_in_file(name: str, value: Any) -> Path:
    """An existing, readable file."""
    path = Path(value)
    if not path.exists():
        raise ValueError(f"{name}: {path} does not exist")
    if not path.is_file():
        raise ValueError(f"{name}: {path} is not a file")
    return path


# ----------------------------------------------------------------------------- JSON and TOML text
def _too_deep(where: Any) -> ValueError:
    return ValueError(f"{where}: nested too deeply (more than {MAX_NESTING} levels of arrays/objects)")


def check_nesting(where: Any, data: Any) -> Any:
    """`data` (parsed JSON/TOML) unless its arrays and objects nest deeper than MAX_NESTING.

    Checked without recursion, so that no later recursive walk (schema validation, json.dumps,
    a merge) can meet a RecursionError on a file that parsed."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list, tuple)):
            if depth > MAX_NESTING:
                raise _too_deep(where)
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return data


def parse_json(where: Any, text: str | bytes) -> Any:
    """json.loads, refusing a document nested too deeply with a ValueError naming `where` (the
    file or option): Python's parser raises RecursionError about 1000 levels down. A malformed
    document still raises json.JSONDecodeError (a ValueError), for the caller's own message."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise _too_deep(where) from None
    return check_nesting(where, data)


def parse_toml(where: Any, text: str) -> dict:
    """tomllib.loads, with a ValueError naming `where` when the text is not TOML or nests too deeply."""
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{where}: not valid TOML: {e}") from None
    except RecursionError:
        raise _too_deep(where) from None
    return check_nesting(where, data)


# ----------------------------------------------------------------------------- argparse types
def _arg(check: Callable[..., Any], what: str, convert: Callable[[str], Any] | None, **kw) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = convert(text) if convert is not None else text
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        try:
            return check("value", value, **kw)
        except (TypeError, ValueError) as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix("value ").removeprefix("value: ")) from None
    parse.__name__ = what  # argparse names the type in its message
    return parse


def arg_int(*, minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """argparse type: an integer within [minimum, maximum]."""
    return _arg(check_int, "an integer", int, minimum=minimum, maximum=maximum)


def arg_float(*, minimum: float | None = None, maximum: float | None = None,
              exclusive_minimum: bool = False) -> Callable[[str], float]:
    """argparse type: a finite number within the range."""
    return _arg(check_float, "a number", float, minimum=minimum, maximum=maximum,
                exclusive_minimum=exclusive_minimum)


def arg_out_dir() -> Callable[[str], Path]:
    """argparse type: an output directory that exists or can be created."""
    return _arg(check_out_dir, "a directory", None)


def arg_out_file() -> Callable[[str], Path]:
    """argparse type: an output file path whose folder exists or can be created."""
    return _arg(check_out_file, "a file path", None)


def arg_in_file() -> Callable[[str], Path]:
    """argparse type: an existing input file."""
    return _arg(check_in_file, "an existing file", None)
