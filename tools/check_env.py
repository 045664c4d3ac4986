"""Check environment.yml the way conda would use it, without conda.

Contract
- ``load(path)`` parses the file; ``problems(env)`` lists what is wrong with its structure (empty list = fine):
  name ``kvsim``, ``channels == ['conda-forge']``, conda dependencies limited to ``python=X.Y`` and ``pip``, and
  exactly one non-empty ``pip:`` block.
- ``install(env_path, python)`` does what conda's pip installer does with the ``pip:`` block: write it to a
  temporary ``condaenv.*.requirements.txt`` next to environment.yml and run ``<python> -m pip install -U -r FILE``
  with that directory as the working directory (so ``-e .[extras]`` means this repository).
- ``requested_extras(env)`` / ``pyproject_extras(path)``: the extras the pip block asks for and those that exist.

- ``install_core(python)``: this repository alone (``pip install --no-compile ROOT``, no extras), run from
  outside it with no PYTHONPATH, as a user of the pure calculator installs it.
- ``build(where)`` / ``prebuilt(name)``: ``make test`` builds both venvs the env stage checks (``conda``: the pip
  block; ``core``: kvsim alone) while its main install runs (pip is single-threaded: the second core is idle
  then), recording each build's return code, log and the sha256 of environment.yml + pyproject.toml in
  ``where/built.json``; the env stage's tests, given ``KVSIM_ENV_PREBUILT=where``, check those venvs instead of
  building their own (a record for other inputs fails the test). Without the variable they build them.

CLI: ``python tools/check_env.py [--structure-only] [--keep DIR]`` checks the structure, then installs the pip
block into a fresh temporary venv and imports kvsim and mlx.core there. Exit status 1 on any problem.
``python tools/check_env.py --build DIR`` only builds the two venvs under DIR (see ``build``).
Conda itself is not used: it is not available on CI (see README).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

import yaml

try:  # Python >= 3.11
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
ENV_FILE = ROOT / "environment.yml"
CONDA_ONLY = {"python", "pip"}  # anything else belongs in pyproject.toml, reached through the pip block
EDITABLE_SELF = re.compile(r"^-e\s+\.(?:\[(?P<extras>[A-Za-z0-9_,\- ]*)\])?$")


def load(path: Path = ENV_FILE) -> dict:
    """Parse environment.yml into a dict."""
    with open(path, encoding="utf-8") as f:
        env = yaml.safe_load(f)
    if not isinstance(env, dict):
        raise ValueError(f"{path}: expected a mapping at top level, got {type(env).__name__}")
    return env


def problems(env: dict) -> list[str]:
    """Everything wrong with the structure of a parsed environment.yml (empty list when it is fine)."""
    found = []
    if set(env) - {"name", "channels", "dependencies"}:
        found.append(f"unexpected top-level keys {sorted(set(env) - {'name', 'channels', 'dependencies'})}")
    if env.get("name") != "kvsim":
        found.append(f"name must be 'kvsim', got {env.get('name')!r}")
    if env.get("channels") != ["conda-forge"]:
        found.append(f"channels must be ['conda-forge'], got {env.get('channels')!r}")
    deps = env.get("dependencies")
    if not isinstance(deps, list):
        return found + ["dependencies must be a list"]
    conda = [d for d in deps if isinstance(d, str)]
    blocks = [d for d in deps if isinstance(d, dict)]
    names = [re.split(r"[=<>! ]", d, maxsplit=1)[0].strip() for d in conda]
    if set(names) - CONDA_ONLY:
        found.append(f"conda dependencies other than python/pip: {sorted(set(names) - CONDA_ONLY)} (put them in pyproject.toml)")
    if "pip" not in names:
        found.append("'pip' must be a conda dependency (conda needs it to install the pip: block)")
    if not any(re.fullmatch(r"python=\d+\.\d+", d.replace(" ", "")) for d in conda):
        found.append("python must be pinned as python=X.Y")
    if len(blocks) != 1 or set(blocks[0]) != {"pip"}:
        found.append(f"exactly one 'pip:' block expected, got {blocks!r}")
    elif not (isinstance(blocks[0]["pip"], list) and blocks[0]["pip"] and all(isinstance(r, str) for r in blocks[0]["pip"])):
        found.append("the pip: block must be a non-empty list of requirement strings")
    if len(deps) != len(conda) + len(blocks):
        found.append("dependencies may only hold strings and the pip: block")
    return found


def pip_requirements(env: dict) -> list[str]:
    """The lines of the pip: block."""
    return next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)


def python_pin(env: dict) -> str:
    """The X.Y of the python=X.Y dependency."""
    return next(d.split("=", 1)[1].strip() for d in env["dependencies"] if isinstance(d, str) and d.startswith("python="))


def requested_extras(env: dict) -> set[str]:
    """Extras named by the pip block's `-e .[a,b]` line (the block must install this repository)."""
    lines = [EDITABLE_SELF.match(r.strip()) for r in pip_requirements(env)]
    matches = [m for m in lines if m]
    if len(matches) != 1:
        raise ValueError("the pip: block must contain exactly one '-e .[extras]' line installing this repository")
    extras = matches[0].group("extras") or ""
    return {e.strip() for e in extras.split(",") if e.strip()}


def pyproject_extras(path: Path = ROOT / "pyproject.toml") -> set[str]:
    """Names of [project.optional-dependencies] in pyproject.toml."""
    with open(path, "rb") as f:
        return set(tomllib.load(f)["project"].get("optional-dependencies", {}))


def install(env_path: Path, python: str, *pip_args: str) -> subprocess.CompletedProcess:
    """Install the pip: block as conda does: `python -m pip install -U -r condaenv.*.requirements.txt`, cwd = its dir."""
    env_path = Path(env_path).resolve()
    reqs = pip_requirements(load(env_path))
    fd, name = tempfile.mkstemp(prefix="condaenv.", suffix=".requirements.txt", dir=env_path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("\n".join(reqs) + "\n")
        cmd = [python, "-m", "pip", "install", "-U", "-r", name, "--exists-action=b", "--disable-pip-version-check", *pip_args]
        return subprocess.run(cmd, cwd=env_path.parent, check=True, text=True, capture_output=True)
    finally:
        Path(name).unlink(missing_ok=True)


def make_venv(path: Path) -> str:
    """Create a fresh venv with pip at `path`; return its python."""
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return str(Path(path) / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))


def clean_env() -> dict:
    """This process's environment without what would make a venv's python see another installation."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def install_core(python: str, cwd: Path) -> subprocess.CompletedProcess:
    """Install this repository alone (no extras, no bytecode) with `python`'s pip, run from `cwd`."""
    cmd = [python, "-m", "pip", "--disable-pip-version-check", "install", "-q", "--no-compile", str(ROOT)]
    return subprocess.run(cmd, cwd=cwd, env=clean_env(), check=True, text=True, capture_output=True, timeout=900)


BUILT = "built.json"


def inputs_digest() -> str:
    """sha256 of environment.yml and pyproject.toml: what the two checked venvs are built from."""
    h = hashlib.sha256()
    for name in ("environment.yml", "pyproject.toml"):
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()


def build(where: Path) -> dict:
    """Build `where`/conda (the pip block, as conda installs it) and `where`/core (kvsim alone), fresh; write and
    return {name: {python, returncode, log, inputs}}."""
    where = Path(where).resolve()
    where.mkdir(parents=True, exist_ok=True)
    (where / BUILT).unlink(missing_ok=True)
    steps = {"conda": lambda py: install(ENV_FILE, py, "--no-compile"),
             "core": lambda py: install_core(py, where)}
    record = {}
    for name, step in steps.items():
        py = make_venv(where / name)
        try:
            done = step(py)
            record[name] = {"returncode": 0, "log": done.stdout + done.stderr}
        except subprocess.CalledProcessError as e:
            record[name] = {"returncode": e.returncode, "log": (e.stdout or "") + (e.stderr or "")}
        record[name].update(python=py, inputs=inputs_digest())
    (where / BUILT).write_text(json.dumps(record, indent=1))
    return record


def prebuilt(name: str) -> str | None:
    """The python of the venv `name` that make test built (KVSIM_ENV_PREBUILT), or None when there is none.

    Raises AssertionError when the record is missing, was built from other inputs, or its install failed."""
    where = os.environ.get("KVSIM_ENV_PREBUILT")
    if not where:
        return None
    path = Path(where) / BUILT
    assert path.exists(), f"KVSIM_ENV_PREBUILT={where} but {path} is missing: the background build did not finish"
    record = json.loads(path.read_text())[name]
    assert record["inputs"] == inputs_digest(), f"{path}: built from another environment.yml/pyproject.toml"
    assert record["returncode"] == 0, f"the {name} venv did not install:\n{record['log'][-3000:]}"
    return record["python"]


IMPORT_CHECK = (
    "import kvsim, mlx.core as mx; "
    "x = mx.arange(4, dtype=mx.float32); mx.eval(x); assert x.sum().item() == 6.0; "
    "print(kvsim.__file__); print(kvsim.__version__); print(mx.__version__)"
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", type=Path, default=ENV_FILE)
    ap.add_argument("--structure-only", action="store_true", help="parse and check, do not install")
    ap.add_argument("--keep", type=Path, help="create the venv here and keep it (default: a temporary dir)")
    ap.add_argument("--build", type=Path, help="only build the env stage's two venvs under this dir (make test)")
    args = ap.parse_args(argv)
    if args.build:
        record = build(args.build)
        for name, r in record.items():
            print(f"{name}: pip exit status {r['returncode']} ({r['python']})")
        return max(r["returncode"] for r in record.values())

    env = load(args.env)
    found = problems(env)
    missing = requested_extras(env) - pyproject_extras() if not found else set()
    found += [f"pip block asks for extras that pyproject.toml lacks: {sorted(missing)}"] if missing else []
    for p in found:
        print(f"environment.yml: {p}", file=sys.stderr)
    if found:
        return 1
    if python_pin(env) != f"{sys.version_info.major}.{sys.version_info.minor}":
        print(f"note: environment.yml pins python={python_pin(env)}, this interpreter is {sys.version.split()[0]}")
    if args.structure_only:
        print("environment.yml: structure ok")
        return 0
    with tempfile.TemporaryDirectory(prefix="kvsim-envcheck-") as tmp:
        where = args.keep or Path(tmp) / "venv"
        py = make_venv(where)
        install(args.env, py)
        out = subprocess.run([py, "-c", IMPORT_CHECK], check=True, text=True, capture_output=True).stdout
        print(f"environment.yml: pip block installs into a fresh venv; imported:\n{out}", end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
