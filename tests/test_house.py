"""Rules that hold the house together (issue 25 item 8): no module-level import cycle between the
package's modules, and no function over 120 lines unless a comment on the line above its `def`
(or its first decorator) says why: `# long function: <reason>`. And (item 3) one plan shape after
the planner: only the planner and the capacity modules tell a spec with instance preferences from
one without."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "blackwell_sm"
MAX_FUNCTION_LINES = 120
REASON = "# long function:"


def module_name(path: Path, root: Path = PKG) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_level_imports(path: Path, known: set[str], root: Path = PKG) -> set[str]:
    """The package modules `path` imports when it is imported (not inside functions, not under
    `if TYPE_CHECKING:`). `from pkg import sub` depends on `pkg.sub` when it is a module, on
    `pkg` otherwise."""
    name = module_name(path, root)
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + is_pkg]
                base = ".".join([*anchor, *([base] if base else [])])
            subs = {f"{base}.{a.name}" for a in node.names} & known
            out |= subs or ({base} & known)
    return out - {name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def import_graph(root: Path = PKG) -> dict[str, set[str]]:
    paths = sorted(root.rglob("*.py"))
    known = {module_name(p, root) for p in paths}
    return {module_name(p, root): module_level_imports(p, known, root) for p in paths}


def long_functions(root: Path = PKG) -> list[str]:
    """Functions over MAX_FUNCTION_LINES lines without the reason comment above them."""
    out = []
    for path in sorted(root.rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            length = node.end_lineno - node.lineno + 1
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            above = lines[first - 2].strip() if first >= 2 else ""
            if length > MAX_FUNCTION_LINES and not above.startswith(REASON):
                out.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name}: {length}")
    return out


# Where code may branch on instance preferences: the planner makes a plan per preference; the
# capacity modules turn a PlanSet into request members (job/) and AWS calls (aws/).
PREFERENCE_HOMES = ("planner/", "api/plan.py", "job/capacity.py", "aws/job_plans.py")
# Presentation only, each with its reason (what is printed, not what is built or sent).
PREFERENCE_RENDERING = {
    "cli/plan.py": "bsm plan prints a row per preference and plans each (cli/plan.py's own table)",
    "cli/submit.py": "the dry run prints the preferences' table instead of the one plan's",
}
# Names that hold the plan shape: `if prefs`, `if x.preference_plans`, `if plans.preferences`,
# `if spec.compute.instance_preferences` (not a described job's `info.instance_preferences`).
PREFERENCE_NAMES = frozenset({"prefs", "preference_plans", "preferences"})


def _names_the_shape(expr: ast.AST) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id in PREFERENCE_NAMES:
            return True
        if isinstance(node, ast.Attribute):
            if node.attr in PREFERENCE_NAMES:
                return True
            inner = node.value
            if node.attr == "instance_preferences" and isinstance(inner, ast.Attribute):
                return inner.attr == "compute"
    return False


def _isinstance_of_preference_plans(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "isinstance"
        and "PreferencePlans" in ast.unparse(node.args[1:])
    )


def preference_branches(root: Path = PKG, allowed: tuple[str, ...] = ()) -> list[str]:
    """`path:line` of each branch on the plan shape outside `allowed` (paths under `root`):
    an if/while/ternary/comprehension test naming it, or an isinstance(..., PreferencePlans)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in allowed):
            continue
        hits: list[ast.AST] = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.If | ast.IfExp | ast.While):
                found = [node.test] if _names_the_shape(node.test) else []
            elif isinstance(node, ast.comprehension):
                found = [t for t in node.ifs if _names_the_shape(t)]
            else:
                found = [node] if _isinstance_of_preference_plans(node) else []
            hits += found
        for t in sorted(hits, key=lambda n: (n.lineno, n.col_offset)):
            out.append(f"{path.relative_to(root.parent)}:{t.lineno} {ast.unparse(t)}")
    return out


def test_no_instance_preference_branching_outside_the_planner_and_capacity():
    found = preference_branches(allowed=(*PREFERENCE_HOMES, *PREFERENCE_RENDERING))
    assert found == [], (
        "branching on instance preferences outside the planner and the capacity modules "
        f"({', '.join(PREFERENCE_HOMES)}): take a PlanSet (planner/preferences.py) and ask "
        "job/capacity.py for what differs per preference:\n" + "\n".join(found)
    )


def test_the_preference_check_finds_if_prefs_and_isinstance(pkg: Path):
    (pkg / "a.py").write_text(
        "def f(plan, prefs, spec):\n"
        "    if prefs:\n        pass\n"
        "    x = 1 if isinstance(plan, PreferencePlans) else 2\n"
        "    if spec.compute.instance_preferences:\n        pass\n"
        "    if info.instance_preferences:\n        pass\n"  # a described job: not the shape
    )
    (pkg / "capacity.py").write_text("def g(prefs):\n    if prefs:\n        pass\n")
    assert preference_branches(pkg, allowed=("capacity.py",)) == [
        "demo/a.py:2 prefs",
        "demo/a.py:4 isinstance(plan, PreferencePlans)",
        "demo/a.py:5 spec.compute.instance_preferences",
    ]


def test_no_module_level_import_cycle():
    assert cycles(import_graph()) == []


def test_no_function_over_120_lines_without_a_reason():
    assert long_functions() == [] and long_functions(PKG.parent / "entrypoints") == []


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    root = tmp_path / "demo"
    root.mkdir()
    (root / "__init__.py").write_text("")
    return root


def test_the_cycle_check_finds_a_cycle_through_a_relative_import(pkg: Path):
    (pkg / "a.py").write_text("from demo.b import x\n")
    (pkg / "b.py").write_text("from .c import y\nx = 1\n")
    (pkg / "c.py").write_text("import demo.a\ny = 2\n")
    (pkg / "d.py").write_text("def f():\n    from demo import a\n")  # inside a function: fine
    assert cycles(import_graph(pkg)) == [["demo.a", "demo.b", "demo.c"]]


def test_the_length_check_wants_the_reason_on_the_line_above(pkg: Path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (pkg / "m.py").write_text(
        f"def long():\n{body}\n\n{REASON} a table, one row a line\n@staticmethod\ndef ok():\n{body}"
    )
    assert long_functions(pkg) == [f"demo/m.py:1 long: {MAX_FUNCTION_LINES + 1}"]
