"""The layer rules as a test: every module of the package (under `blackwell_sm/`, and in the
top-level `entrypoints/` and `templates/` it ships as `blackwell_sm.entrypoints` and
`blackwell_sm.templates`) belongs to exactly one layer, and
imports (at the top, inside functions, and the lazy `"blackwell_sm.x:attr"` strings of the CLI
and the notebook API) only what its layer may.

The table below is the one source; docs/layout.md shows it between the `layers` markers, checked
equal here (`python tests/test_layers.py` prints it for pasting).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

REPO = Path(__file__).resolve().parents[1]
PKG = "blackwell_sm"

# Third-party packages by role. Client code never imports the training stack; container code never
# imports the AWS stack; heavy client imports wait inside the functions that need them, so
# `bsm --help` stays instant.
TRAINING_STACK = frozenset({"torch", "torchao", "safetensors", "peft"})
AWS_STACK = frozenset({"boto3", "botocore", "sagemaker"})
HEAVY = frozenset({"boto3", "botocore", "sagemaker", "matplotlib", "transformers", "tokenizers"})


class Layer(NamedTuple):
    modules: tuple[str, ...]  # dotted prefixes under blackwell_sm (a package or one module)
    job: str
    may_import: frozenset[str]  # other layers
    never: frozenset[str] = frozenset()  # third-party roots, not even inside a function
    lazy_only: frozenset[str] = frozenset()  # third-party roots allowed only inside functions
    lazy_layers: frozenset[str] = frozenset()  # other layers allowed only inside functions


def _l(*names: str) -> frozenset[str]:
    return frozenset(names)


# What the client's front doors (the notebook API, and the CLI above it) may call.
CLIENT = _l(
    "package",
    "spec",
    "hardware",
    "plan",
    "planner",
    "job",
    "aws",
    "data",
    "records",
    "metrics",
    "errors",
    "opt_ml",
    "safe_load",
)

LAYERS: dict[str, Layer] = {
    "errors": Layer(
        ("errors",), "the error classes and their exit codes", _l(), TRAINING_STACK | AWS_STACK
    ),
    "opt_ml": Layer(
        ("opt_ml",),
        "the container contract: /opt/ml paths, files, env variables",
        _l(),
        TRAINING_STACK | AWS_STACK,
    ),
    "metrics": Layer(
        ("metrics",),
        "the metric line format and SageMaker's regexes",
        _l(),
        TRAINING_STACK | AWS_STACK,
    ),
    "safe_load": Layer(
        ("safe_load", "_yaml12", "atomic_write", "output_place", "state_files"),
        "one guarded reader for every file: specs, plans, manifests, profiles (PyYAML only in _yaml12, loaded for YAML files); one atomic writer for every output; where an output may go (output_place); one opener for state and lock files (state_files)",
        _l("errors"),
        TRAINING_STACK | AWS_STACK,
    ),
    "spec": Layer(
        ("spec", "templates"),
        "the user's words as validated data; presets",
        _l("errors", "safe_load"),
        TRAINING_STACK | AWS_STACK,
        _l("yaml"),
    ),
    "hardware": Layer(
        ("hardware",),
        "instance catalog: GPUs, memory, peak FLOP/s, links, prices",
        _l("errors", "opt_ml"),
        TRAINING_STACK | AWS_STACK,
    ),
    "plan": Layer(
        (
            "planner.plan",
            "planner.batch",
            "planner.notes",
            "planner.plan_versions",
            "planner.summary",
            "planner.units",
            "planner.batch",
        ),
        "the Plan schema: the planner's output, the container's input; its summary for people (units, text, HTML)",
        _l("spec", "safe_load"),
        TRAINING_STACK | AWS_STACK,
    ),
    "planner": Layer(
        ("planner",),
        "memory model, step-time model, search, explanations (pure)",
        _l("spec", "hardware", "plan", "errors", "opt_ml", "safe_load"),
        TRAINING_STACK | AWS_STACK,
        _l("numpy", "scipy"),
    ),
    "records": Layer(
        ("records",),
        "run records: each metrics.jsonl kind, summary.json, the [bsm-*] lines; their one reader",
        _l("spec", "metrics", "errors", "safe_load"),
        TRAINING_STACK | AWS_STACK,
    ),
    "job": Layer(
        ("job",),
        "Plan + spec → CreateTrainingJob request, bundle (with the container's wheels), SDK view",
        _l(
            "package",
            "spec",
            "hardware",
            "plan",
            "planner",
            "metrics",
            "errors",
            "opt_ml",
            "safe_load",
        ),
        TRAINING_STACK | {"boto3"},
        _l("botocore", "sagemaker"),
    ),
    "aws": Layer(
        ("aws",),
        "every network call (boto3): S3, jobs, logs, training plans; purchase locks and records",
        _l(
            "package",
            "job",
            "spec",
            "plan",
            "planner",
            "data",
            "metrics",
            "records",
            "errors",
            "safe_load",
        ),
        TRAINING_STACK | {"click", "sagemaker"},
        _l("boto3", "botocore"),
    ),
    "data": Layer(
        ("data",),
        "the token shard format and `bsm data prepare`",
        _l("errors", "safe_load"),
        TRAINING_STACK | AWS_STACK,
        _l("tokenizers", "transformers"),
    ),
    "local": Layer(
        ("local",),
        "`bsm run-local`: an /opt/ml tree here, the real launcher",
        _l(
            "spec",
            "hardware",
            "plan",
            "planner",
            "data",
            "records",
            "errors",
            "opt_ml",
            "safe_load",
        ),
        TRAINING_STACK | AWS_STACK,
    ),
    "runs": Layer(
        ("runs",),
        "what reads finished runs: a run folder's or job's records, `bsm calibrate` (sources, profile), `bsm report` (matplotlib)",
        _l(
            "spec",
            "hardware",
            "plan",
            "planner",
            "job",
            "aws",
            "records",
            "metrics",
            "errors",
            "opt_ml",
            "safe_load",
        ),
        TRAINING_STACK,
        _l("boto3", "botocore", "matplotlib"),
    ),
    "api": Layer(
        ("api",),
        "the notebook front door: one decider per question (plan, traced plan, capacity fit, job count)",
        CLIENT,
        TRAINING_STACK,
        HEAVY,
        _l("train"),  # traces: the container's loop on fake tensors, only when asked
    ),
    "cli": Layer(
        ("cli",),
        "thin click commands, loaded lazily",
        CLIENT | _l("local", "runs", "api"),
        TRAINING_STACK,
        HEAVY | {"rich", "yaml"},
    ),
    "package": Layer(
        ("__init__", "__main__"),
        "the notebook API (lazy) and `python -m blackwell_sm`",
        _l("spec", "plan", "planner", "job", "aws", "cli", "errors", "api"),
        TRAINING_STACK | AWS_STACK,
    ),
    "launch": Layer(
        ("launch",),
        "container: reads /opt/ml, sets NCCL/EFA, supervises torchrun",
        _l("plan", "records", "errors", "opt_ml", "safe_load"),
        AWS_STACK | {"click"},
        _l("torch"),
    ),
    "entrypoints": Layer(
        ("entrypoints",),
        "container: the bundle's entry script and its stdlib-only bootstrap (run as scripts)",
        _l("launch"),
        AWS_STACK | TRAINING_STACK | {"click", "pydantic"},
    ),
    "train": Layer(
        ("train",),
        "container: model, data order, FSDP2, checkpoints, metrics, loop",
        _l("spec", "plan", "data", "metrics", "records", "errors", "opt_ml", "safe_load"),
        AWS_STACK | {"click"},
    ),
}

# Edges still to remove; delete each line when its change lands (the allow-list only shrinks:
# test_pending_edges_still_exist fails on a line whose edge is gone). Issue 12 moved the SDK
# view's upload to aws/sdk.py and the consent prompt to cli/; left: job/sdk.py still makes the
# SageMaker Session's boto3 session itself when the caller passes none (aws/sdk.py could).
PENDING: set[tuple[str, str]] = {
    ("blackwell_sm.job.sdk", "boto3"),
}


def layer_of(module: str) -> str | None:
    """The layer whose longest prefix matches `module` (a dotted name under blackwell_sm)."""
    rel = module.removeprefix(PKG).lstrip(".") or "__init__"
    best: tuple[int, str] | None = None
    for name, layer in LAYERS.items():
        for prefix in layer.modules:
            matches = rel == prefix or rel.startswith(prefix + ".")
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), name)
    return best[1] if best else None


def package_modules(root: Path) -> list[tuple[str, Path]]:
    """(module, file) of every `.py` under `root/blackwell_sm` and in the folders outside it that
    `root/pyproject.toml` maps into the package (`entrypoints/` is `blackwell_sm.entrypoints`)."""
    folders = {PKG: root / PKG}
    if (root / "pyproject.toml").is_file():
        from blackwell_sm.job.package_files import source_folders

        for pkg, folder in source_folders(root / "pyproject.toml").items():
            if not folder.is_relative_to(root / PKG):
                folders[pkg] = folder
    out = []
    for pkg, folder in folders.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [*pkg.split("."), *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__" and len(parts) > 1:
                parts.pop()
            out.append((".".join(parts), path))
    return out


_LAZY_REF = re.compile(rf"^({PKG}(?:\.\w+)+):\w+$")


def imports(module: str, source: str, *, is_package: bool = False) -> list[tuple[str, bool]]:
    """(imported module, at module top level) for every import in `source`, lazy strings too."""
    tree = ast.parse(source)
    top = {id(n) for n in tree.body}
    for n in tree.body:  # try/except and other `if` blocks at the top are top level;
        # `if TYPE_CHECKING:` imports never run, so they are lazy (a type names a heavy class)
        typing_only = isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
        if isinstance(n, (ast.If, ast.Try)) and not typing_only:
            top |= {id(c) for c in ast.walk(n)}
        elif typing_only:
            top -= {id(n)}
    out: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        at_top = id(node) in top
        if isinstance(node, ast.Import):
            out += [(a.name, at_top) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if is_package else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            if base == PKG or (node.level and not node.module):
                out += [(f"{base}.{a.name}", at_top) for a in node.names]
            else:
                out.append((base, at_top))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            m = _LAZY_REF.match(node.value)
            if m:
                out.append((m.group(1), False))
    return out


def check_module(module: str, source: str, *, is_package: bool = False) -> list[str]:
    """The rule breaks in one module's source, as readable lines."""
    mine = layer_of(module)
    if mine is None:
        return [f"{module}: no layer in tests/test_layers.py LAYERS covers it"]
    layer, out = LAYERS[mine], []
    for target, at_top in imports(module, source, is_package=is_package):
        root = target.split(".")[0]
        if root == PKG:
            if target == PKG + ".__version__" or target == PKG:
                other = "package"
            else:
                other = layer_of(target)
            if other is None or other == mine or other in layer.may_import:
                continue
            if any(module == m and target.startswith(t) for m, t in PENDING):
                continue
            if not at_top and other in layer.lazy_layers:
                continue
            out.append(f"{module} ({mine}) imports {target} ({other})")
        elif root in layer.never and (module, root) not in PENDING:
            out.append(f"{module} ({mine}) imports {root}, which the {mine} layer never may")
        elif root in layer.lazy_only and at_top:
            out.append(f"{module} ({mine}) imports {root} at the top; only inside a function")
    return out


def violations(root: Path) -> list[str]:
    """Every rule break in the package's modules under `root`."""
    out: list[str] = []
    for module, path in package_modules(root):
        out += check_module(module, path.read_text(), is_package=path.name == "__init__.py")
    return out


def render_table() -> str:
    """docs/layout.md's layer table, from LAYERS."""

    packages = {module for module, path in package_modules(REPO) if path.name == "__init__.py"}

    def show(m: str) -> str:
        return f"`{m}/`" if f"{PKG}.{m}" in packages else f"`{m.replace('.', '/')}.py`"

    rows = [
        "| layer | modules | job | may import | never imports |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, layer in LAYERS.items():
        mods = ", ".join(show(m) for m in layer.modules)
        may = ", ".join(sorted(layer.may_import)) or "—"
        if layer.lazy_layers:
            may += "; inside functions: " + ", ".join(sorted(layer.lazy_layers))
        never = ", ".join(sorted(layer.never))
        if layer.lazy_only:
            never += "; only inside functions: " + ", ".join(sorted(layer.lazy_only))
        rows.append(f"| {name} | {mods} | {layer.job} | {may} | {never} |")
    return "\n".join(rows)


def test_every_module_obeys_its_layer() -> None:
    assert violations(REPO) == []


def test_pending_edges_still_exist() -> None:
    """A PENDING line whose edge is gone must be deleted (the allow-list only shrinks)."""
    found = set()
    for module, target in PENDING:
        path = REPO / (module.replace(".", "/") + ".py")
        if path.is_file():
            names = [t for t, _ in imports(module, path.read_text())]
            if any(n == target or n.startswith(target + ".") for n in names):
                found.add((module, target))
    assert found == PENDING, f"delete from PENDING: {sorted(PENDING - found)}"


def test_layout_doc_shows_the_table() -> None:
    text = (REPO / "docs" / "layout.md").read_text()
    m = re.search(r"<!-- layers:begin -->\n(.*?)\n<!-- layers:end -->", text, re.S)
    assert m, "docs/layout.md needs the <!-- layers:begin --> ... <!-- layers:end --> block"
    assert m.group(1).strip() == render_table(), "run `python tests/test_layers.py` and paste"


@pytest.mark.parametrize(
    ("where", "source", "expected"),
    [
        ("train", "def f():\n    import boto3\n", "never may"),
        ("job", "from blackwell_sm.aws import s3\n", "(aws)"),
        ("job", "def f():\n    from blackwell_sm.aws.jobs import create_job\n", "(aws)"),
        ("planner", "from blackwell_sm.train.model import Transformer\n", "(train)"),
        ("planner", "def f():\n    from blackwell_sm.train.trace import trace_plan\n", "(train)"),
        ("api", "from blackwell_sm.train.trace import trace_plan\n", "(train)"),
        ("planner", "def f():\n    from blackwell_sm.api.plan import plan\n", "(api)"),
        ("launch", "import torch\n", "only inside a function"),
        ("cli", "import boto3\n", "only inside a function"),
        ("train", "from blackwell_sm.hardware import CATALOG\n", "(hardware)"),
        ("train", "from blackwell_sm.planner.api import make_plan\n", "(planner)"),
    ],
)
def test_the_check_catches_a_new_module(
    tmp_path: Path, where: str, source: str, expected: str
) -> None:
    """A temporary module breaking a rule, in a copy of the tree's layout, is found by name."""
    (tmp_path / PKG / where).mkdir(parents=True)
    (tmp_path / PKG / where / "probe.py").write_text(source)
    found = violations(tmp_path)
    assert len(found) == 1 and f"{PKG}.{where}.probe" in found[0] and expected in found[0], found


def test_a_module_outside_every_layer_fails(tmp_path: Path) -> None:
    (tmp_path / PKG).mkdir()
    (tmp_path / PKG / "newthing.py").write_text("x = 1\n")
    assert violations(tmp_path) == [
        f"{PKG}.newthing: no layer in tests/test_layers.py LAYERS covers it"
    ]


def test_container_side_never_imports_aws_libraries() -> None:
    """At run time too: importing every train/ and launch/ module loads no AWS library."""
    code = (
        "import sys, pkgutil, importlib, blackwell_sm.train as t, blackwell_sm.launch as l\n"
        "for p in (t, l):\n"
        "    for m in pkgutil.iter_modules(p.__path__):\n"
        "        if m.name != '__main__':\n"
        "            importlib.import_module(p.__name__ + '.' + m.name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore', 'sagemaker'))\n"
        "print(bad)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


if __name__ == "__main__":
    sys.stdout.write(render_table() + "\n")


def test_no_module_is_over_400_lines_unless_it_says_why():
    """A module past 400 lines is split along its seams, or its docstring says why it must be
    one piece (issue 9)."""
    import ast

    long = []
    for _, path in package_modules(REPO):
        text = path.read_text()
        if text.count("\n") > 400 and "one piece" not in (ast.get_docstring(ast.parse(text)) or ""):
            long.append(f"{path.relative_to(REPO)}: {text.count(chr(10))} lines")
    assert long == []
