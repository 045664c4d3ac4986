"""environment.yml: its structure, its extras, and a real install of its pip: block into a fresh venv.

Conda is not available on CI, so the install test does what conda does with the pip: block
(tools/check_env.py): requirements file next to environment.yml, `pip install -U -r`, cwd = that directory.
With a warm pip cache it takes about a minute.
"""

import copy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import check_env  # noqa: E402


@pytest.fixture(scope="module")
def env():
    return check_env.load(ROOT / "environment.yml")


def test_structure_is_what_conda_needs(env):
    assert check_env.problems(env) == []
    assert check_env.pip_requirements(env) == ["-e .[lessons,test]"]
    assert check_env.python_pin(env) == "3.11"


def test_structure_check_catches_mistakes(env):
    extra_conda_dep = copy.deepcopy(env)
    extra_conda_dep["dependencies"].insert(0, "numpy")
    no_pip_block = copy.deepcopy(env)
    no_pip_block["dependencies"] = ["python=3.11", "pip"]
    other_channel = {**env, "channels": ["defaults"]}
    assert any("numpy" in p for p in check_env.problems(extra_conda_dep))
    assert any("pip:" in p for p in check_env.problems(no_pip_block))
    assert any("channels" in p for p in check_env.problems(other_channel))


def test_pip_block_names_extras_that_exist(env):
    requested = check_env.requested_extras(env)
    assert requested == {"lessons", "test"}
    assert requested <= check_env.pyproject_extras(ROOT / "pyproject.toml")


@pytest.mark.slow  # about a minute: `make test-env`, its own stage of `make test`
def test_pip_block_installs_into_a_fresh_venv(tmp_path, env):
    py = check_env.prebuilt("conda")  # make test builds it beside its own install (tools/check_env.py)
    if py is None:
        py = check_env.make_venv(tmp_path / "venv")
        check_env.install(ROOT / "environment.yml", py, "--no-compile")  # conda compiles; the install is the same
    assert not list(ROOT.glob("condaenv.*.requirements.txt")), "temporary requirements file left behind"

    out = subprocess.run([py, "-c", check_env.IMPORT_CHECK], check=True, text=True, capture_output=True).stdout
    kvsim_file, kvsim_version, mlx_version = out.split()
    assert Path(kvsim_file).resolve() == ROOT / "kvsim" / "__init__.py"  # editable install of this checkout
    assert kvsim_version.count(".") == 2 and mlx_version.startswith("0.32.")
    # The extras asked for are really there: lessons (JupyterLab, jupytext, matplotlib, mlx) and test (pytest, nbval, ...).
    mods = "jupyterlab, jupytext, ipywidgets, matplotlib, numpy, pytest, xdist, nbval, hypothesis, yaml, mlx_lm"
    subprocess.run([py, "-c", f"import {mods}"], check=True)
    assert (Path(py).parent / "kvsim").exists(), "console script `kvsim` not installed"
