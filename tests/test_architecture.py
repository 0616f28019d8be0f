"""The house's rules, read from the source (nothing is imported). The core is in layers, each importing only
the layers below it: ``runtime/`` (how a model runs), the math and records (``sampling``, ``config``, ``trace``
...), ``trees/``, ``drafts/``, the loop (``decoder``, ``batch``, ``models`` ...); above the core, ``labs/`` and
``views/``, then ``app/``. gradio only in app/, plotly only in views/, no import cycle, no private name imported
across modules, and modules and functions of a readable size. docs/ARCHITECTURE.md draws the same map."""
import ast
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "specviz"
WINGS = ("labs", "views", "app", "engines", "conformance")
MAX_FUNCTION_LINES, MAX_LAYOUT_LINES = 50, 60  # a module's length is guidance (CONTRIBUTING), split by job


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the file, parsed and walked once per test process (every rule below reads the same files)."""
    return tuple(ast.walk(ast.parse(path.read_text())))


@cache
def imports(path: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(absolute module, names) for every import in the file, at any depth (lazy imports count too)."""
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out = []
    for node in nodes(path):
        if isinstance(node, ast.Import):
            out += [(a.name, ()) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out.append((module, tuple(a.name for a in node.names)))
    return tuple(out)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


FOLDERS = ("runtime", "trees", "drafts", "slim")  # the core's folders, one idea each
BASE = {"config", "sampling", "rules", "theory", "goodput", "texts", "records", "trace_schema", "trace"}  # the math, its records
LOOP = {"kpolicy", "commit", "decoder", "batch", "reference", "models", "serve"}  # the algorithm's loop over drafts and trees


def wing(module: str) -> str:
    """The part a module belongs to: a core layer ('runtime', 'base', 'trees', 'drafts', 'loop', 'slim'), a wing
    ('labs', 'views', 'app') or 'api' (the package's __init__, the public face)."""
    parts = module.split(".")
    if module == "specviz":
        return "api"
    if parts[1] in WINGS + FOLDERS:
        return parts[1]
    assert parts[1] in BASE | LOOP, f"{module}: a top-level module must be named in BASE or LOOP"
    return "base" if parts[1] in BASE else "loop"


@cache
def internal_edges() -> frozenset[tuple[str, str]]:
    """(importer, imported) between specviz modules ('from pkg import mod' counts as an edge to pkg.mod)."""
    edges = set()
    for name, path in MODULES.items():
        for module, names in imports(path):
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in MODULES] or [module]
            edges |= {(name, t) for t in targets if t in MODULES and t != name}
    return frozenset(edges)


CORE = ("runtime", "base", "trees", "drafts", "loop", "slim")  # bottom to top (slim: the loop in numpy)
ALLOWED = {part: set(CORE[: i + 1]) for i, part in enumerate(CORE)}
ALLOWED["base"] = {"base"}  # the math and records stand on their own
ALLOWED.update({"engines": {*CORE, "engines"}, "labs": {*CORE, "engines", "labs"},
                "views": {*CORE, "engines", "views"}, "app": {*CORE, "engines", "labs", "views", "conformance", "app"},
                "api": {*CORE, "engines", "labs", "conformance", "api"},
                "conformance": {*CORE, "engines", "conformance"}})
PLOT_OF = {("conformance", "specviz.views.conformance_plots")}  # the conformance kit's one pure plot, and no other view


def test_imports_run_one_way():
    edges = internal_edges()
    assert {("specviz.app.demo", "specviz.app.explorer"), ("specviz.labs.sweep", "specviz.decoder"),
            ("specviz.decoder", "specviz.sampling"), ("specviz.drafts.drafter", "specviz.runtime.lm")} <= edges
    wrong = [(a, b) for a, b in edges if wing(b) not in ALLOWED[wing(a)] and (wing(a), b) not in PLOT_OF]
    assert not wrong, f"imports against the layers (app > labs, views > loop > drafts > trees > runtime): {sorted(wrong)}"


def test_top_level_reads_as_the_algorithm():
    top = {n.split(".")[1] for n in MODULES if n.count(".") == 1} - set(WINGS + FOLDERS)
    assert top == BASE | LOOP, f"top-level modules outside the map: {sorted(top ^ (BASE | LOOP))}"


def test_no_tab_imports_another_tab():
    tabs = {n for n in MODULES if n.startswith("specviz.app.") and (n.endswith("_tab") or n.endswith(".explorer"))}
    assert len(tabs) >= 6
    crossing = [(a, b) for a, b in internal_edges() if a in tabs and b in tabs]
    assert not crossing, f"tabs share code through each other: {crossing} (move it into a module below the tabs)"


@pytest.mark.parametrize("library, home", [("gradio", "app"), ("plotly", "views")])
def test_ui_libraries_stay_in_their_wing(library, home):
    users = sorted(name for name, path in MODULES.items()
                   if any(m == library or m.startswith(library + ".") for m, _ in imports(path)))
    assert users and all(wing(u) == home for u in users), f"{library} imported outside specviz/{home}/: {users}"


def test_no_import_cycle():
    graph = {}
    for a, b in internal_edges():
        graph.setdefault(a, set()).add(b)
    done, stack = set(), []

    def visit(node):
        if node in stack:
            raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(node):] + [node]))
        if node in done:
            return
        stack.append(node)
        for nxt in graph.get(node, ()):
            visit(nxt)
        stack.pop()
        done.add(node)

    for node in MODULES:
        visit(node)


def test_no_private_name_imported_across_modules():
    private = [(name, module, n) for name, path in MODULES.items() for module, names in imports(path)
               if module.startswith("specviz") for n in names if n.startswith("_")]
    assert not private, f"private names imported from another module: {private}"


def test_functions_stay_readable():
    long_functions = []
    for name, path in MODULES.items():
        for node in nodes(path):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                layout = name.startswith("specviz.app.") and (node.name == "build" or node.name.startswith("_"))
                if size > (MAX_LAYOUT_LINES if layout else MAX_FUNCTION_LINES):
                    long_functions.append((name, node.name, size))
    assert not long_functions, long_functions
