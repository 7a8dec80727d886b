"""The project's structure, read from its source files with ``ast`` (nothing of the project is imported
except the migration modules and the environment registry, which says what the environments are called):

- no circle between modules: every ``import`` counts, at module level, inside functions and under
  ``if TYPE_CHECKING``, with relative imports resolved and ``from package import module`` counted as an
  import of that module;
- no cycle between apps (the top-level packages: ``qval``, ``qval_site``, ``leaderboard``, ...), and the
  Django-free core ``qval`` imports neither Django nor any app;
- no cycle between apps in the migration graph (each migration's ``dependencies``);
- no module outside an environment's folder names an environment (:mod:`qval.envs.registry` is the one place).

A task sent by name (``current_app.send_task("workers.tasks.x", ...)``) is no import: that is how a
service enqueues a task whose module imports the service.

On failure the message lists each circle with the import lines that make it, which is what to change.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
NOT_PACKAGES = {"tests"}
"""Top-level folders with an ``__init__.py`` that are not the project's code."""
CORE = "qval"
CORE_MUST_NOT_IMPORT = {"django", "rest_framework", "drf_spectacular", "allauth"}
"""The web frameworks the Django-free core stays out of (besides the apps, which it never imports)."""


@dataclass(frozen=True)
class Site:
    """Where one import is written."""

    path: str
    line: int
    in_function: bool

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" + (" (in a function)" if self.in_function else "")


def packages(root: Path = REPO) -> list[str]:
    """The project's top-level packages: every folder of the repository with an ``__init__.py``."""
    return sorted(p.parent.name for p in root.glob("*/__init__.py") if p.parent.name not in NOT_PACKAGES)


def module_files(root: Path) -> dict[str, Path]:
    """Module name -> source file, for every ``.py`` file of the packages (a package is its ``__init__``)."""
    found: dict[str, Path] = {}
    for pkg in packages(root):
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _resolve(name: str, modules: set[str]) -> str | None:
    """The module an import of ``name`` runs: the longest leading part of it that is one of ours."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


class _Imports(ast.NodeVisitor):
    """Every import of one file, with whether it is written inside a function."""

    def __init__(self) -> None:
        self.found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
        self._depth = 0

    def _function(self, node: ast.AST) -> None:
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_Import(self, node: ast.Import) -> None:
        self.found.append((node, self._depth > 0))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.found.append((node, self._depth > 0))


@dataclass
class ImportGraph:
    """Module -> imported module -> where; and each module's imports of modules not ours (top name)."""

    edges: dict[str, dict[str, list[Site]]]
    external: dict[str, dict[str, list[Site]]]


@functools.lru_cache(maxsize=None)
def import_graph(root: Path = REPO) -> ImportGraph:
    """The import graph of the packages under ``root`` (the project's), read from their source once."""
    files = module_files(root)
    modules = set(files)
    edges: dict[str, dict[str, list[Site]]] = {m: defaultdict(list) for m in files}
    external: dict[str, dict[str, list[Site]]] = {m: defaultdict(list) for m in files}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        package = module.split(".") if is_package else module.split(".")[:-1]
        visitor = _Imports()
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        for node, in_function in visitor.found:
            site = Site(str(path.relative_to(root)), node.lineno, in_function)
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    keep = len(package) - (node.level - 1)
                    assert keep > 0, f"{site}: relative import above the top-level package"
                    base = ".".join(package[:keep] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if alias.name != "*" and sub in modules else base)
            for target in targets:
                ours = _resolve(target, modules)
                sites = external[module][target.split(".")[0]] if ours is None else edges[module][ours]
                if ours != module and site not in sites:
                    sites.append(site)
    return ImportGraph(edges, external)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (each sorted), by Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    nodes = sorted(set(graph) | {t for targets in graph.values() for t in targets})
    for root in nodes:
        if root in index:
            continue
        # Iterative depth-first search: (node, iterator over its successors).
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest cycle through the first node of a component, as a path that ends where it starts."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph.get(node, ())):
                if nxt not in members:
                    continue
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if nxt not in previous:
                    previous[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


def describe(
    what: str, graph: dict[str, set[str]], components: list[list[str]], why: dict[tuple[str, str], list[str]]
) -> str:
    """A failure message: for each circle, its members, one cycle and the lines behind each of its arrows."""
    lines = [f"{len(components)} {what} circle(s):"]
    for component in components:
        members = set(component)
        lines.append(f"- {', '.join(component)}")
        lines.append(f"  e.g. {' -> '.join(shortest_cycle(graph, component))}")
        for source in component:
            for target in sorted(graph[source] & members):
                lines.append(f"    {source} -> {target}: {'; '.join(why[(source, target)])}")
    return "\n".join(lines)


def test_no_import_circle_between_modules() -> None:
    graph = import_graph()
    arrows = {m: set(targets) for m, targets in graph.edges.items()}
    why = {(m, t): [str(s) for s in sites] for m, targets in graph.edges.items() for t, sites in targets.items()}
    circles = strongly_connected(arrows)
    assert not circles, describe("module", arrows, circles, why)


def app_graph(graph: ImportGraph) -> tuple[dict[str, set[str]], dict[tuple[str, str], list[str]]]:
    """The imports between top-level packages, with the module imports behind each."""
    arrows: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, targets in graph.edges.items():
        for target, sites in targets.items():
            source_app, target_app = module.split(".")[0], target.split(".")[0]
            if source_app != target_app:
                arrows[source_app].add(target_app)
                why[(source_app, target_app)].append(f"{module} -> {target} ({sites[0]})")
    return arrows, why


def test_no_cycle_between_apps() -> None:
    arrows, why = app_graph(import_graph())
    circles = strongly_connected(arrows)
    assert not circles, describe("app", arrows, circles, why)


def test_core_imports_no_django_and_no_app() -> None:
    graph = import_graph()
    offending = [
        f"{module} imports {target}: {', '.join(map(str, sites))}"
        for module, targets in sorted(graph.edges.items())
        if module.split(".")[0] == CORE
        for target, sites in sorted(targets.items())
        if target.split(".")[0] != CORE
    ] + [
        f"{module} imports {name}: {', '.join(map(str, sites))}"
        for module, names in sorted(graph.external.items())
        if module.split(".")[0] == CORE
        for name, sites in sorted(names.items())
        if name in CORE_MUST_NOT_IMPORT
    ]
    assert not offending, "qval/ must stay free of Django and of the apps:\n" + "\n".join(offending)


def test_no_cycle_between_apps_in_migrations() -> None:
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(None, ignore_no_migrations=True)
    arrows: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], list[str]] = defaultdict(list)
    for key, node in loader.graph.node_map.items():
        for parent in node.parents:
            if parent.key[0] != key[0]:
                arrows[key[0]].add(parent.key[0])
                why[(key[0], parent.key[0])].append(f"{'/'.join(key)} depends on {'/'.join(parent.key)}")
    circles = strongly_connected(arrows)
    assert not circles, describe("migration app", arrows, circles, why)


def test_the_site_image_copies_every_package() -> None:
    """containers/site.Containerfile copies each of the project's packages (an app left out kills the compose
    services at start: ModuleNotFoundError)."""
    text = (REPO / "containers" / "site.Containerfile").read_text()
    copied = {line.split()[1] for line in text.splitlines() if line.startswith("COPY ")}
    missing = [p for p in packages() if p not in copied]
    assert not missing, f"containers/site.Containerfile copies no {', '.join(missing)}"


def test_the_graph_finds_circles(tmp_path: Path) -> None:
    """The reader itself: a function-level import, a relative import and ``from package import module``
    each make an arrow, so a circle built of them is found."""
    files = {
        "a/__init__.py": "",
        "a/x.py": "def f():\n    from . import y\n",
        "a/y.py": "from a.sub import z\n",
        "a/sub/__init__.py": "",
        "a/sub/z.py": "from ..x import f\nimport os\n",
        "b/__init__.py": "",
        "b/w.py": "import a.sub.z\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path)
    arrows = {m: set(t) for m, t in graph.edges.items()}
    assert arrows["b.w"] == {"a.sub.z"} and "os" in graph.external["a.sub.z"]
    assert strongly_connected(arrows) == [["a.sub.z", "a.x", "a.y"]]
    assert shortest_cycle(arrows, ["a.sub.z", "a.x", "a.y"]) == ["a.sub.z", "a.x", "a.y", "a.sub.z"]



ENVIRONMENT_NAMES_ALLOWED_IN = ("qval/paper/",)
"""Where, besides the environment folders, an environment's name may be written: a paper's mapping of its
environment names onto ours (:meth:`qval.paper.base.PublishedResults.environments`: its results sit on our
environments' rows)."""


def test_the_environment_registry_is_the_one_place_that_lists_environments() -> None:
    """No module outside an environment's own folder (``qval/envs/<name>/``) writes the name of an environment, one of
    its builders or one of its datasets' slugs as a string: the builds, the site's catalogue, Best-of-N and the
    methods read :mod:`qval.envs.registry` (which imports the folders, so this test imports it too).  Tests,
    benchmarks, scripts and migrations (which freeze what they change) may name them."""
    from qval.envs import registry

    names = {*registry.ENVIRONMENTS, *registry.BUILDERS, *(key.partition("@")[0] for key in registry.VERSIONS)}
    assert {"frozenlake", "alfworld-all-types", "terminalbench-lite"} <= names  # the registry found the folders
    folders = {entry.folder.resolve() for entry in registry.ENVIRONMENTS.values()}
    skipped = {"tests", "benchmarks", "scripts", "examples"}
    written: list[str] = []
    for path in sorted(module_files(REPO).values()):  # the project's packages (no virtualenv, no var/)
        relative = path.relative_to(REPO)
        if relative.parts[0] in skipped or "migrations" in relative.parts or \
                relative.as_posix().startswith(ENVIRONMENT_NAMES_ALLOWED_IN) or \
                any(folder in path.resolve().parents for folder in folders):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                written.append(f"{relative}:{node.lineno}: {node.value!r}")
    assert not written, "environments named outside their folders (read qval.envs.registry):\n" + "\n".join(written)


def calls_named(root: Path, names: set[str]) -> dict[str, list[str]]:
    """Where each function or method call whose name is one of ``names`` is written, as ``path:function``
    (the innermost enclosing function, ``<module>`` at module level), over the project's packages."""
    found: dict[str, list[str]] = defaultdict(list)

    def visit(node: ast.AST, path: str, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            if isinstance(child, ast.Call):
                func = child.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if called in names:
                    found[called].append(f"{path}:{where}")
            visit(child, path, inner)

    for module, path in module_files(root).items():
        visit(ast.parse(path.read_text(), str(path)), path.relative_to(root).as_posix(), "<module>")
    return found


def test_a_method_container_is_run_by_one_function() -> None:
    """The site's gpu worker, a remote gpu worker and ``qval run-container`` run a method container through one
    function: it alone loads an uploaded image (cached or not) and serves a job's backbone. The code methods'
    sandbox (``qval/methods/sandbox.py``) runs the platform's own image, not an upload."""
    found = calls_named(REPO, {"load_cached", "BackboneServer", "run_method_container"})
    one = "qval/containers.py:run_method_container"
    assert found["load_cached"] == [one]
    # the built-in LLM methods serve a local model to themselves (no container)
    assert [where for where in found["BackboneServer"] if where != "qval/methods/llm.py:open_backbone"] == [one]
    assert sorted(found["run_method_container"]) == [
        "qval/cli.py:cmd_run_container", "qval/remote_worker.py:_run", "workers/tasks.py:run_container_submission"]


def test_route_names_are_unique() -> None:
    """Each named route of the URLconfs has a name of its own (``reverse`` finds the last of two)."""
    names: dict[str, list[str]] = defaultdict(list)
    for urls in sorted(REPO.glob("*/urls.py")):
        for node in ast.walk(ast.parse(urls.read_text(), str(urls))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("path", "re_path"):
                for kw in node.keywords:
                    if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                        names[kw.value.value].append(f"{urls.relative_to(REPO)}:{node.lineno}")
    twice = {name: where for name, where in names.items() if len(where) > 1}
    assert names and not twice, twice


API_APPS = {"leaderboard", "submissions", "board", "workers"}
"""The apps that serve API calls, each from its ``apis.py``: datasets and builds, submissions and comparisons,
the boards' numbers, the workers' job protocol and status."""
EXCEPTION_HANDLER = "qval_site.api_errors.api_exception_handler"
DOMAIN_REFUSALS = {"SubmissionRejected", "InvalidSelection", "ComparisonError", "ComparisonBusy", "JobRefused"}
"""The project's exceptions that :data:`EXCEPTION_HANDLER` answers: no API view catches them itself."""


def _app_sources() -> dict[str, list[Path]]:
    """Each installed app of the project (a folder of the repository, with or without an ``__init__.py``) and
    its source files, migrations left out."""
    from django.conf import settings

    apps = [name for name in settings.INSTALLED_APPS if "." not in name and (REPO / name).is_dir()]
    return {app: sorted(p for p in (REPO / app).rglob("*.py") if "migrations" not in p.parts) for app in apps}


def api_view_classes(tree: ast.Module) -> list[str]:
    """The classes of a module that are DRF views: a base named ``...APIView`` or ``...ViewSet``, or a class of the
    same module that is one."""
    found: list[str] = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
        if any(b.endswith(("APIView", "ViewSet")) or b in found for b in bases):
            found.append(node.name)
    return found


def test_the_api_views_live_in_their_apps_apis_modules() -> None:
    """Each API view is in the ``apis.py`` of the app that owns its concept (no ``qval_site/api.py`` serving all
    of them), and the site's URLs take them from there."""
    assert not (REPO / "qval_site" / "api.py").exists(), "qval_site/api.py: the API views live in <app>/apis.py"
    elsewhere: list[str] = []
    serving: set[str] = set()
    for app, paths in _app_sources().items():
        for path in paths:
            views = api_view_classes(ast.parse(path.read_text(encoding="utf-8"), str(path)))
            if views and path.name == "apis.py" and path.parent.name == app:
                serving.add(app)
            elif views:
                elsewhere.append(f"{path.relative_to(REPO)}: {', '.join(views)}")
    assert not elsewhere, "API views outside their app's apis.py:\n" + "\n".join(elsewhere)
    assert serving == API_APPS, serving
    urls = ast.parse((REPO / "qval_site" / "urls.py").read_text(encoding="utf-8"))
    imported = {f"{node.module}.{alias.name}" for node in ast.walk(urls) if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert {f"{app}.apis" for app in API_APPS} <= imported, imported


def test_one_exception_handler_answers_the_projects_refusals() -> None:
    """``REST_FRAMEWORK["EXCEPTION_HANDLER"]`` is :func:`qval_site.api_errors.api_exception_handler`, and no API
    module maps a refusal it answers to a response by hand (``except SubmissionRejected``, ...)."""
    from django.conf import settings
    from rest_framework.settings import api_settings

    from qval_site import api_errors

    assert settings.REST_FRAMEWORK["EXCEPTION_HANDLER"] == EXCEPTION_HANDLER
    assert api_settings.EXCEPTION_HANDLER is api_errors.api_exception_handler
    assert {cls.__name__ for cls in api_errors.ANSWERS} == DOMAIN_REFUSALS
    caught: list[str] = []
    for app in API_APPS:
        path = REPO / app / "apis.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                names = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
                for name in names:
                    written = name.attr if isinstance(name, ast.Attribute) else getattr(name, "id", "")
                    if written in DOMAIN_REFUSALS:
                        caught.append(f"{path.relative_to(REPO)}:{node.lineno}: except {written}")
    assert not caught, "answered by qval_site.api_errors, not by hand:\n" + "\n".join(caught)


TEMPLATE_OVERRIDES = {"admin", "account", "allauth", "registration"}
"""Template folders of Django's and allauth's own templates, which the site overrides or renders under their names."""


def test_templates_live_in_folders_named_after_their_apps() -> None:
    """Each template an app's code names (``render(request, "board/board.html", ...)``) is in the folder of that
    app, or of a package it imports (a partial shared from below: ``jobs/_progress.html``), and each folder of
    ``templates/`` is an app's or a package's or one of :data:`TEMPLATE_OVERRIDES`."""
    arrows, _ = app_graph(import_graph())
    apps = _app_sources()
    misplaced = [
        f"{path.relative_to(REPO)}:{node.lineno} names {node.value}"
        for app, paths in apps.items() for path in paths
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".html")
        and "/" in node.value and node.value.split("/")[0] not in TEMPLATE_OVERRIDES | {app} | arrows[app]
    ]
    folders = {p.name for p in (REPO / "templates").iterdir() if p.is_dir()}
    strays = sorted(folders - set(apps) - set(packages()) - TEMPLATE_OVERRIDES)
    assert not misplaced and not strays, (misplaced, f"template folders named after no package: {strays}")


HEADLINE_LITERALS_ALLOWED = ("qval/metric_registry.py", "qval/metrics.py", "qval/budget.py", "qval/paper/")
"""Where a headline metric's name may be written: the registry that gives the roles, the metrics' own formulas (an
interval computed one way for Spearman's ρ, another for the state-local mean) and the authors' files' field names."""


def test_the_headline_metrics_are_named_by_the_registry() -> None:
    """No module names a headline metric by a string (``"spearman"``, ``"-spearman"``): it reads
    :data:`qval.metric_registry.HEADLINE` or :data:`~qval.metric_registry.HEADLINES`, so the roles are data."""
    from qval import metric_registry

    names = set(metric_registry.HEADLINES) | {f"-{name}" for name in metric_registry.HEADLINES}
    written = [
        f"{path}:{node.lineno} {node.value!r}"
        for path in (str(p.relative_to(REPO)) for p in module_files(REPO).values())
        if "migrations" not in path and not path.startswith(HEADLINE_LITERALS_ALLOWED)
        for node in ast.walk(ast.parse((REPO / path).read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value in names
    ]
    assert not written, "name the headline metrics through qval.metric_registry:\n" + "\n".join(written)
