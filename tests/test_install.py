"""normgen as users install it (issue 34): a real wheel built from the source tree, installed
outside the checkout and run from elsewhere; and every import of normgen/**/*.py declared in
pyproject.toml. CPU only. Nothing is mocked: pip builds the wheel (build isolation fetches
setuptools from PyPI) and installs it.

The wheel is built from a copy of the checkout, without its build outputs, for two reasons:
setuptools builds in the source tree and ships whatever an earlier build left in build/lib
(an instance since removed from generated/ would still be in the wheel, so the exact file
checks below could not hold), and writing build/ and *.egg-info into a checkout that other
runs share would race with them."""
from __future__ import annotations

import ast
import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

import normgen
from normgen import paths
from normgen.matrix import select

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

REPO = Path(__file__).resolve().parent.parent
SHIPPED = ("templates", "generated")  # top-level folders the wheel carries as normgen/<name>

# Imports outside the core dependencies: module -> the extras that must provide it.
OPTIONAL = {
    "torch": ("torch", "bench"),  # normgen.arrays (torch tensors in and out), normgen.bench.timing
    "matplotlib": ("bench",),  # normgen.bench.report's plots
}
# Distributions of modules that may not be installed where the tests run.
NOT_INSTALLED = {"torch": "torch", "matplotlib": "matplotlib"}


def _build_output(rel: Path) -> bool:
    """What the copy leaves out: build outputs and caches (as .gitignore does)."""
    top = rel.parts[0]
    return (top in {".git", "build", "dist", ".pytest_cache", ".hypothesis"}
            or top.startswith(".venv")
            or any(p == "__pycache__" or p.endswith(".egg-info") for p in rel.parts)
            or rel.suffix in {".pyc", ".tmp"})


def _files(folder: Path) -> set[str]:
    """The files under folder, as '/'-joined paths relative to it, less build outputs."""
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")
            if p.is_file() and not _build_output(p.relative_to(folder))}


def _run(cmd, *, cwd, env=None, timeout=300) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, timeout=timeout,
                       capture_output=True, text=True)
    assert r.returncode == 0, (f"{' '.join(map(str, cmd))} exited {r.returncode}\n"
                               f"--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-4000:]}")
    return r


@pytest.fixture(scope="session")
def source(tmp_path_factory) -> Path:
    """A snapshot of the checkout, without build outputs."""
    src = tmp_path_factory.mktemp("install") / "src"
    shutil.copytree(REPO, src, ignore=lambda d, names: [
        n for n in names if _build_output((Path(d) / n).relative_to(REPO))])
    return src


@pytest.fixture(scope="session")
def wheel(source) -> Path:
    out = source.parent / "wheelhouse"
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", out, source],
         cwd=source.parent, env=env, timeout=600)
    (whl,) = out.glob("normgen-*.whl")
    return whl


@pytest.fixture(scope="session")
def installed(wheel) -> Path:
    """The wheel installed with pip --target, outside the checkout."""
    site = wheel.parent.parent / "site"
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", site,
          wheel], cwd=wheel.parent, env=env)
    return site


def _run_installed(site: Path, *args) -> str:
    """Run with the installed copy first on sys.path (the test environment supplies the
    dependencies), from an empty folder outside the checkout."""
    cwd = site.parent / "elsewhere"
    cwd.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(site)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
        NORMGEN_CACHE_DIR=str(site.parent / "cache"))
    env.pop("NORMGEN_GENERATED_DIR", None)
    return _run(args, cwd=cwd, env=env).stdout


# ---- (a) what the wheel holds ---------------------------------------------------------------

def test_wheel_ships_the_package_templates_and_generated_set(wheel, source):
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in SHIPPED:
        expected = {f"normgen/{folder}/{f}" for f in _files(source / folder)}
        shipped = {n for n in names if n.startswith(f"normgen/{folder}/")}
        assert shipped == expected, (f"{folder}/: missing {sorted(expected - shipped)[:10]}, "
                                     f"extra {sorted(shipped - expected)[:10]}")
    assert "normgen/generated/registry.py" in names
    assert any(n.endswith(".cu") for n in names)
    assert {n for n in names if n.endswith(".j2")}, "no template in the wheel"
    # every file of the package, subpackages included (pyproject lists packages explicitly)
    package = {f"normgen/{f}" for f in _files(source / "normgen")}
    assert package <= names, f"not in the wheel: {sorted(package - names)}"
    assert "normgen/__main__.py" in names


def test_wheel_metadata_script_and_version(wheel):
    z = zipfile.ZipFile(wheel)
    info = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
    points = configparser.ConfigParser()
    points.read_string(z.read(f"{info}/entry_points.txt").decode())
    assert points["console_scripts"]["normgen"] == "normgen.cli:main"
    fields = dict(line.split(": ", 1) for line in z.read(f"{info}/METADATA").decode().splitlines()
                  if ": " in line and not line.startswith(" "))
    assert fields["Version"] == normgen.__version__  # pyproject reads normgen.__version__


# ---- (b) the installed wheel, run from outside the checkout ---------------------------------

def test_installed_cli_lists_the_default_set(installed):
    expected = [s.name for s in select()]
    listed = _run_installed(installed, sys.executable, "-m", "normgen", "--list").split()
    assert len(listed) == len(expected)
    assert listed == expected
    script = installed / "bin" / "normgen"  # pip --target puts scripts under bin/
    assert script.is_file()
    assert _run_installed(installed, script, "--list").split() == expected
    assert "Usage:" in _run_installed(installed, sys.executable, "-m", "normgen", "--help")


def test_installed_package_finds_templates_generated_set_and_registry(installed):
    code = textwrap.dedent("""
        import json
        import normgen
        from normgen import paths, dispatch
        print(json.dumps({
            "package": normgen.__file__,
            "generated": str(paths.GENERATED),
            "templates": str(paths.TEMPLATES),
            "registry": len(dispatch.registry()),
        }))
    """)
    found = json.loads(_run_installed(installed, sys.executable, "-c", code).splitlines()[-1])
    package = (installed / "normgen").resolve()
    assert Path(found["package"]).resolve() == package / "__init__.py"
    assert Path(found["generated"]).resolve() == package / "generated"
    assert Path(found["templates"]).resolve() == package / "templates"
    assert found["registry"] > 0


def test_installed_templates_render(installed, tmp_path):
    """The installed package finds its templates: one instance written to a fresh folder.
    (That the shipped set is what the templates make is test_generate's up-to-date test.)"""
    name = select()[0].name
    _run_installed(installed, sys.executable, "-m", "normgen", "--filter", name, "--out", tmp_path)
    assert (tmp_path / f"{name}.cu").is_file()
    assert (tmp_path / paths.HEADER).is_file() and (tmp_path / paths.REGISTRY).is_file()


# ---- (c) every import is declared -------------------------------------------------------------

def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _names(requirements) -> set[str]:
    return {_canon(re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", r.strip()).group()) for r in requirements}


def _imports() -> dict[str, str]:
    """Third-party modules normgen/**/*.py imports (anywhere, functions included; subpackages
    such as normgen/bench/ too): the dotted name -> where, e.g. 'cuda.pathfinder' ->
    'compile.py:41', 'matplotlib' -> 'bench/report.py:176'."""
    found = {}
    for path in sorted((REPO / "normgen").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.partition(".")[0]
                if top not in sys.stdlib_module_names and top != "normgen":
                    found.setdefault(module, f"{path.relative_to(REPO / 'normgen').as_posix()}:{node.lineno}")
    return found


def _providers(module: str) -> set[str]:
    """The distributions that provide module; for a namespace that several share (cuda:
    cuda-bindings, cuda-pathfinder), those holding module's own subpackage."""
    top = module.partition(".")[0]
    dists = metadata.packages_distributions().get(top, [])
    if not dists:
        return {_canon(NOT_INSTALLED[top])} if top in NOT_INSTALLED else set()
    if len(set(dists)) > 1:
        prefix = "/".join(module.split(".")[:2])
        dists = [d for d in dists
                 if any(f.as_posix() == prefix + ".py" or f.as_posix().startswith(prefix + "/")
                        for f in metadata.files(d) or ())]
    return {_canon(d) for d in dists}


def test_every_import_is_a_declared_dependency():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = _names(project["dependencies"])
    extras = {k: _names(v) for k, v in project["optional-dependencies"].items()}
    imports = _imports()
    assert "cuda.pathfinder" in imports and "cupy" in imports  # the scan sees the package
    assert "matplotlib" in imports  # imported in normgen/bench/ alone: the scan sees subpackages
    problems = []
    for module, where in sorted(imports.items()):
        top = module.partition(".")[0]
        dists = _providers(module)
        if not dists:
            problems.append(f"{module} ({where}): no installed distribution provides it; "
                            f"install it or add it to NOT_INSTALLED")
        elif top in OPTIONAL:
            for extra in OPTIONAL[top]:
                if not dists & extras.get(extra, set()):
                    problems.append(f"{module} ({where}): {sorted(dists)} not in extra [{extra}]")
        elif not dists & core:
            problems.append(f"{module} ({where}): {sorted(dists)} not in dependencies")
    assert not problems, "\n".join(problems)
    assert "cuda-pathfinder" in core  # imported directly, not left to cuda-bindings
    assert {"tqdm", "filelock"} <= core
    assert {"pytest", "pytest-xdist", "hypothesis"} <= extras["test"]


def test_version_is_defined_once():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "normgen.__version__"
