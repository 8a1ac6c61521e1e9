"""The package's import structure: every module imports on its own in a fresh interpreter, the
import graph has no cycle, the packages keep their dependency order, and importing a registry
registers (or loads) nothing.

A fresh interpreter per module would start torch ~140 times; instead one child process
preloads torch (third-party, never lrkv) and forks once per module, so each import still
starts with no lrkv module loaded — which is what an import cycle needs to show itself
(`cannot import name … from partially initialized module`).
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
import textwrap

import grimp
import pytest

import lrkv

# `python -m lrkv` runs the CLI when imported; tests/test_cli.py runs it
ENTRY_POINTS = {"lrkv.__main__"}
MODULES = sorted(m.name for m in pkgutil.walk_packages(lrkv.__path__, "lrkv.") if m.name not in ENTRY_POINTS)

# high -> low: a package may import only from the layers below it; siblings in one Layer are
# independent of each other (DESIGN §2)
LAYERS = (
    "cli",
    "bench",
    "mutants",
    grimp.Layer("kernels", "distributed", "compiled", "testing", independent=True),
    grimp.Layer("verify", "proofs", independent=True),
    "reference",
    "spec",
    "checks",
)

_PROBE = textwrap.dedent("""
    import json, os, sys, traceback
    import torch  # noqa: F401  preloaded once; every child starts with no lrkv module loaded
    results = {}
    for name in sys.argv[1:]:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                __import__(name)
                msg = ""
            except BaseException as e:  # ImportError above all, but anything an import raises
                msg = "".join(traceback.format_exception_only(type(e), e)).strip()
            os.write(w, msg.encode())
            os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 1 << 16):
            data += chunk
        os.close(r)
        _, status = os.waitpid(pid, 0)
        results[name] = data.decode() or ("" if status == 0 else f"child exited with status {status}")
    print(json.dumps(results))
""")


def fresh_imports(modules: list[str]) -> dict[str, str]:
    """module -> '' if it imported in a fresh interpreter, else the exception it raised."""
    res = subprocess.run([sys.executable, "-c", _PROBE, *modules], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def imported() -> dict[str, str]:
    return fresh_imports(MODULES)


def test_the_walk_finds_the_package():
    assert len(MODULES) > 100 and "lrkv.verify.grids" in MODULES and "lrkv.verify.levels.kernel" in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_in_a_fresh_interpreter(imported, module):
    assert imported[module] == "", f"import {module} in a fresh interpreter: {imported[module]}"


def test_the_probe_sees_a_cycle(tmp_path):
    """The probe would have caught the cycle it exists for: a module importing a name from a
    module that imports it back."""
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("X = 1\nfrom .b import Y  # noqa\n")
    (pkg / "b.py").write_text("from .a import X  # noqa\nY = 2\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(tmp_path), os.environ.get("PYTHONPATH"))))}
    res = subprocess.run([sys.executable, "-c", _PROBE, "cyc.b", "cyc.a"], capture_output=True, text=True,
                         timeout=120, env=env)
    found = json.loads(res.stdout.strip().splitlines()[-1])
    assert "partially initialized module" in found["cyc.b"] and found["cyc.a"] == ""


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    adj = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    for root in sorted(adj):
        if root in index:
            continue
        work = [(root, iter(adj[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(adj.get(w, ()))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("lrkv", include_external_packages=False)


def test_no_import_cycle(graph):
    """No cycle among lrkv's modules, counting the imports inside functions too."""
    assert _cycles(graph) == []


def test_cycle_finder_finds_one():
    g = grimp.ImportGraph()
    for m in ("p.a", "p.b", "p.c"):
        g.add_module(m)
    g.add_import(importer="p.a", imported="p.b")
    g.add_import(importer="p.b", imported="p.c")
    assert _cycles(g) == []
    g.add_import(importer="p.c", imported="p.a")
    assert _cycles(g) == [["p.a", "p.b", "p.c"]]


def test_packages_keep_their_dependency_order(graph):
    illegal = graph.find_illegal_dependencies_for_layers(layers=LAYERS, containers={"lrkv"})
    assert not illegal, "; ".join(f"{d.importer} -> {d.imported}" for d in illegal)


def test_importing_a_registry_loads_nothing():
    """The level and backend registries name their entries; importing them loads none."""
    code = textwrap.dedent("""
        import sys
        import lrkv.verify.levels, lrkv.verify.backend_registry, lrkv.verify.runner, lrkv.verify.gate
        from lrkv.verify.levels import LEVEL_MODULES
        loaded = sorted(m for m in sys.modules if m in set(LEVEL_MODULES.values())
                        or m.startswith(("lrkv.verify.builtin_backends", "lrkv.kernels", "lrkv.compiled",
                                         "lrkv.distributed", "triton", "onnxruntime")))
        print(loaded)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]"
