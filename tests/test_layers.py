"""The layering of docs/architecture.md ("Layers"), checked: the document's list is the one source
of truth, read here; every module of ``dspark`` and the app sits in exactly one layer, and no
import, at module level or inside a function, runs up a layer or ties two packages of one layer in
a loop. Each rule is also shown to fail on a planted graph or file."""

from __future__ import annotations

import ast
import re

import pytest
from test_structure import ROOT, imports_of, modules

DOC = ROOT / "docs" / "architecture.md"
MODULE = re.compile(r"`((?:dspark|dspark_studio)(?:\.\w+)*)`")


def layers_in(text: str) -> list[tuple[str, list[str]]]:
    """(layer name, the modules and packages it names) for each item of the document's "Layers"
    list, lowest first."""
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    items = re.findall(r"^\d+\. \*\*(.+?)\*\*(.*?)(?=^\d+\. \*\*|\n\n|\Z)", section, flags=re.M | re.S)
    return [(name, MODULE.findall(body)) for name, body in items]


def layer_table(layers: list[tuple[str, list[str]]]) -> dict[str, int]:
    """Each name of the list -> its layer's number (0 the lowest); a name given twice is refused."""
    table: dict[str, int] = {}
    for i, (_, names) in enumerate(layers):
        for name in names:
            assert name not in table, f"{name} is in two layers"
            table[name] = i
    return table


def layer_of(module: str, table: dict[str, int]) -> int | None:
    """The layer of ``module``: its own entry, else its nearest package's (None: in no layer)."""
    parts = module.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in table:
            return table[".".join(parts[:k])]
    return None


def unit_of(module: str, table: dict[str, int]) -> str:
    """The unit loops are counted between: a module's nearest entry of the list, or, for a module
    the list covers through ``dspark`` itself, the module: ``dspark.bench.arms`` is ``dspark.bench``."""
    parts = module.split(".")
    for k in range(len(parts), 1, -1):
        if ".".join(parts[:k]) in table:
            return ".".join(parts[:k])
    return module


def upward(graph: dict[str, set[str]], table: dict[str, int]) -> list[str]:
    """Every import in ``graph`` (module -> modules it imports) from a lower layer to a higher one."""
    return sorted(
        f"{m} (layer {layer_of(m, table) + 1}) imports {d} (layer {layer_of(d, table) + 1})"
        for m, deps in graph.items()
        for d in deps
        if layer_of(m, table) is not None and layer_of(d, table) is not None and layer_of(d, table) > layer_of(m, table)
    )


def unit_loops(graph: dict[str, set[str]], table: dict[str, int]) -> list[list[str]]:
    """Loops between units (packages and modules of the list, ``unit_of``): each as the units on
    it, the first repeated at the end."""
    units: dict[str, set[str]] = {}
    for m, deps in graph.items():
        units.setdefault(unit_of(m, table), set()).update(unit_of(d, table) for d in deps)
    for u in units:
        units[u].discard(u)
    loops, state = [], {}

    def visit(u, trail):
        if state.get(u) == 1:
            loops.append(trail[trail.index(u) :] + [u])
            return
        if state.get(u) == 2:
            return
        state[u] = 1
        for v in sorted(units.get(u, ())):
            visit(v, trail + [u])
        state[u] = 2

    for u in sorted(units):
        visit(u, [])
    return loops


@pytest.fixture(scope="module")
def table() -> dict[str, int]:
    return layer_table(layers_in(DOC.read_text()))


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return {n: imports_of(n, p) - {n} for n, p in modules().items()}


def test_every_module_is_in_a_layer_and_every_name_is_a_module(table):
    layers = layers_in(DOC.read_text())
    assert [name for name, _ in layers][:1] == ["data and files"] and layers[-1][0] == "the app's entry points"
    assert not [m for m in modules() if layer_of(m, table) is None], "modules in no layer of docs/architecture.md"
    assert not [n for n in table if n not in modules()], "names in docs/architecture.md's layers that are no module"


def test_no_import_runs_up_a_layer(table, graph):
    assert not upward(graph, table)


def test_no_two_packages_or_modules_import_each_other_in_a_loop(table, graph):
    assert not unit_loops(graph, table)


def test_the_library_takes_no_public_name_from_its_face():
    """``dspark/__init__.py`` hands its public names (``dspark.generate``, ...) on lazily, from the
    layers above it: a module of the library that took one from there would import upward
    unseen by the rules above."""
    import dspark

    taken = []
    for name, path in modules().items():
        if not name.startswith("dspark."):
            continue
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (
                node.module == "dspark" and not node.level or node.level == len(pkg.split(".")) and not node.module
            ):
                taken += [f"{name}: {a.name}" for a in node.names if a.name in dspark.__all__]
    assert not taken


# --- each rule fails where it should -----------------------------------------------------------

PLANTED = """1. **low** (plain things): `dspark.errors` `dspark.bench`
2. **high** (what uses them): `dspark.engine` `dspark.demo`
"""


def test_a_planted_upward_import_fails():
    table = layer_table(layers_in("\n## Layers\n" + PLANTED))
    assert table == {"dspark.errors": 0, "dspark.bench": 0, "dspark.engine": 1, "dspark.demo": 1}
    assert upward({"dspark.engine": {"dspark.errors"}}, table) == []
    assert upward({"dspark.errors": {"dspark.engine"}}, table) == [
        "dspark.errors (layer 1) imports dspark.engine (layer 2)"
    ]
    # a package's modules sit in its layer: bench's report may not import demo's build
    assert upward({"dspark.bench.report": {"dspark.demo.build"}}, table) == [
        "dspark.bench.report (layer 1) imports dspark.demo.build (layer 2)"
    ]


def test_a_planted_import_inside_a_function_is_read(tmp_path):
    """The graph counts an import inside a function as much as one at the top of the file."""
    planted = tmp_path / "errors.py"
    planted.write_text("def late():\n    from .engine import generate\n    return generate\n")
    table = layer_table(layers_in(DOC.read_text()))
    assert upward({"dspark.errors": imports_of("dspark.errors", planted)}, table) == [
        "dspark.errors (layer 1) imports dspark.engine (layer 3)"
    ]


def test_a_planted_package_loop_fails():
    table = layer_table(layers_in("\n## Layers\n" + PLANTED))
    # bench and demo of one layer, each through one of its modules: the loop issue #39 found
    graph = {"dspark.bench.contexts": {"dspark.demo.corpus"}, "dspark.demo.measure": {"dspark.bench.contexts"}}
    assert unit_loops(graph, table) == [["dspark.bench", "dspark.demo", "dspark.bench"]]
    assert unit_loops({"dspark.demo.measure": {"dspark.bench.contexts"}}, table) == []


def test_a_module_in_no_layer_or_in_two_fails():
    table = layer_table(layers_in("\n## Layers\n" + PLANTED))
    assert layer_of("dspark.cli", table) is None and layer_of("dspark.bench.arms", table) == 0
    with pytest.raises(AssertionError, match="in two layers"):
        layer_table(layers_in("\n## Layers\n" + PLANTED + "3. **again**: `dspark.errors`\n"))
