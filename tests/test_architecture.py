"""The shape of the code: no import cycles (imports inside functions included), algorithms/
knows nothing of the pipeline, the launcher plugin imports only the sweep machinery, no
algorithm is named in pipeline/ code (capabilities come from the specs) and no cluster kind
outside pipeline/cluster/, pipeline/ modules are at most 500 lines and import only from their
own floor or below (FLOORS) and hold no function over 80 lines, no private name is imported
across modules, and only Hydra's public API is used."""

import ast
import re
from pathlib import Path

from algorithms import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("algorithms", "pipeline", "hydra_plugins")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _imports(path: Path) -> set[str]:
    """Every module named by an import statement in ``path``, at any depth."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
            out.add(node.module)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    return {m: {t for t in map(resolve, _imports(p)) if t and t != m}
            for m, p in modules.items()}


def test_no_import_cycles():
    graph, cycles = _graph(), []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, cycles


def test_algorithms_know_nothing_of_the_pipeline():
    forbidden = ("pipeline", "hydra_plugins", "hydra", "dask", "distributed", "zarr", "xarray",
                 "omegaconf")
    for name, path in _modules().items():
        if name.startswith("algorithms"):
            bad = {i for i in _imports(path) if i.split(".")[0] in forbidden}
            assert not bad, (name, bad)


def test_the_launcher_imports_only_the_sweep_machinery():
    ours = {i for i in _imports(ROOT / "hydra_plugins/sgp_dask_launcher/dask_launcher.py")
            if i.split(".")[0] in PACKAGES}
    assert ours == {"pipeline.sweep.launch", "pipeline.sweep.launch.launch"}


def test_pipeline_modules_are_small():
    """pipeline/ reads as the flow it carries: sub-packages of modules of at most 500 lines."""
    big = {name: n for name, path in _modules().items()
           if name.startswith("pipeline") and (n := len(path.read_text().splitlines())) > 500}
    assert not big, big


def test_only_hydras_public_api_is_used():
    private = {name: sorted(i for i in _imports(path) if i.startswith("hydra._internal"))
               for name, path in _modules().items()}
    assert not {name: found for name, found in private.items() if found}


def test_no_algorithm_is_named_in_pipeline_code():
    names = set(REGISTRY)
    for name, path in _modules().items():
        if not name.startswith("pipeline"):
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
                      and n.body and isinstance(n.body[0], ast.Expr)
                      and isinstance(n.body[0].value, ast.Constant)}
        words = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and id(node) not in docstrings:
                words.update(re.findall(r"\w+", node.value))
            elif isinstance(node, ast.Name):
                words.add(node.id)
            elif isinstance(node, ast.Attribute):
                words.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                words.add(node.name)
        assert not words & names, (name, words & names)


def test_no_cluster_kind_is_named_outside_the_cluster_package():
    """A cluster kind is one row of pipeline.cluster.kinds: code outside pipeline/cluster/ asks
    the kind's row (on this machine, a batch system) and never compares its name."""
    from pipeline.cluster.kinds import KINDS

    for name, path in _modules().items():
        if name.startswith(("algorithms", "pipeline.cluster")):
            continue
        named = {node.value for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Constant) and node.value in KINDS}
        assert not named, (name, named)


# pipeline/'s floors, lowest first: a module imports only from its own floor or below (imports
# inside functions too). Floor 0 is the package's small utilities (files written atomically,
# leases, checksums, code versions, one-line texts); a job's config, then its data, its result
# files, the cluster it may run on, where its kernel blocks come from, the job itself, the
# report over results, the sweep (which renders a sweep's report); the commands (cli, app,
# export, publish, bench, estimators) on top
FLOORS = (
    ("pipeline", "pipeline.atomic", "pipeline.oserrors", "pipeline.outputs", "pipeline.console",
     "pipeline.watch", "pipeline.lines", "pipeline.lease", "pipeline.checksum",
     "pipeline.codeversion", "pipeline.command", "pipeline.task_functions"),
    ("pipeline.config",),
    ("pipeline.datasets",),
    ("pipeline.results",),
    ("pipeline.cluster",),
    ("pipeline.blocks",),
    ("pipeline.job",),
    ("pipeline.report",),
    ("pipeline.sweep",),
)


def _floor(module: str) -> int | None:
    """The floor of a pipeline module (None: a command on top)."""
    for floor, packages in enumerate(FLOORS):
        if any(module == p or (p != "pipeline" and module.startswith(p + ".")) for p in packages):
            return floor
    return None


def test_pipeline_imports_only_from_its_own_floor_or_below():
    up = []
    for module, targets in _graph().items():
        floor = _floor(module) if module.startswith("pipeline") else None
        if floor is None:
            continue
        for target in targets:
            if target.startswith("pipeline") and (_floor(target) is None
                                                  or _floor(target) > floor):
                up.append(f"{module} -> {target}")
    assert not up, "\n".join(sorted(up))


def test_no_private_name_is_imported_across_modules():
    """A name another module imports is public: no ``from m import _name`` in the packages
    (a module's private helpers are its own; what it shares it names without the underscore)."""
    private = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                private += [f"{name}: from {node.module} import {alias.name}"
                            for alias in node.names
                            if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert not private, "\n".join(private)


def test_no_function_is_over_80_lines():
    """A function of pipeline/ or algorithms/ reads on one screen and a half: its phases are
    named helpers (an algorithm's fit: set-up, its iterations, its error bars, its summary)."""
    long = []
    for name, path in _modules().items():
        if name.startswith(("pipeline", "algorithms")):
            long += [f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
                     for node in ast.walk(ast.parse(path.read_text()))
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and node.end_lineno - node.lineno + 1 > 80]
    assert not long, "\n".join(long)
