"""The pip extras: the core installs and runs alone; an MLX folder without MLX stops at one line naming the extra.

- Fast: in a fresh interpreter where ``import mlx`` fails (``sys.modules['mlx'] = None``, Python's own way to make
  an import fail), importing each MLX folder or one of its modules raises one ImportError line naming
  ``kvsim[mlx]``; ``kvsim calc / compare / models`` load neither mlx nor matplotlib nor ipywidgets.
- Slow (the env stage, ``make test-env``): ``pip install <this checkout>`` with no extras into a fresh venv; there
  ``kvsim calc`` and ``kvsim compare`` run, mlx and matplotlib are not installed, and ``import kvsim.cache`` fails
  with that one line for real.
"""

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvsim.calc.extras import MLX_EXTRA, missing_mlx_message

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("mlx", "matplotlib", "ipywidgets")
MLX_MODULES = ["kvsim.cache", "kvsim.model", "kvsim.decode", "kvsim.measure",
               "kvsim.cache.standard", "kvsim.model.transformer", "kvsim.decode.generate", "kvsim.measure.growth",
               "kvsim.measure.quant_error"]  # quant_error: a lesson's measurement


def _python(code: str, *args: str, python: str = sys.executable, cwd: Path = ROOT, env=None):
    return subprocess.run([python, "-c", code, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)


NO_MLX = ("import importlib, json, sys\n"
          "sys.modules['mlx'] = None  # `import mlx` now raises ImportError, as where mlx is not installed\n"
          "try:\n"
          "    importlib.import_module('mlx.core')\n"
          "except ImportError as e:\n"
          "    reason = str(e)\n"
          "try:\n"
          "    importlib.import_module(sys.argv[1])\n"
          "except ImportError as e:\n"
          "    print(json.dumps([str(e), reason, e.__cause__ is None, e.__suppress_context__]))\n"
          "else:\n"
          "    print(json.dumps(None))\n")


@pytest.mark.parametrize("module", MLX_MODULES)
def test_an_mlx_module_without_mlx_raises_one_line_naming_the_extra(module):
    proc = _python(NO_MLX, module)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got is not None, f"{module} imported although mlx cannot be imported"
    message, reason, no_cause, context_hidden = got
    folder = ".".join(module.split(".")[:2])  # the folder's __init__ checks first
    assert message == missing_mlx_message(folder, reason)
    assert "\n" not in message and f"pip install 'kvsim[{MLX_EXTRA}]'" in message
    assert no_cause and context_hidden  # no chained traceback under the line


def test_the_message_names_module_extra_and_reason():
    assert missing_mlx_message("kvsim.cache", "No module named 'mlx'") == (
        "kvsim.cache needs MLX (Linux or macOS on Apple silicon): pip install 'kvsim[mlx]' (No module named 'mlx')")


CLI_HEAVY = ("import sys\n"
             "from kvsim.cli import main\n"
             "codes = [main(a.split('|')) for a in sys.argv[1:]]\n"
             "print(codes, sorted({m.split('.')[0] for m in sys.modules} & {'mlx', 'matplotlib', 'ipywidgets'}))\n")
CORE_COMMANDS = ["calc|llama-3-8b", "calc|llama-3-8b|--gpu|H100 80GB|--explain|--tp|2",
                 "calc|gemma-3-27b|--engine|mlx-lm|--prompt-tokens|1000|--kv-dtype|q4|--json",
                 "compare|llama-3-8b|deepseek-v3|qwen3-next-80b-a3b|--tokens|32768", "models", "gpus"]


def test_core_commands_load_no_mlx_or_matplotlib():
    proc = _python(CLI_HEAVY, *CORE_COMMANDS)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == f"{[0] * len(CORE_COMMANDS)} []"


@pytest.mark.slow  # about 30 s with a warm pip cache: `make test-env`
def test_the_core_installs_and_runs_alone(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import check_env

    py = check_env.prebuilt("core")  # make test builds it beside its own install (tools/check_env.py)
    if py is None:
        py = check_env.make_venv(tmp_path / "venv")
        check_env.install_core(py, tmp_path)  # no bytecode: nothing here needs it
    env = check_env.clean_env()
    run = functools.partial(subprocess.run, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    pip = [py, "-m", "pip", "--disable-pip-version-check"]
    listed = json.loads(run([*pip, "list", "--format=json"], check=True).stdout)
    names = {p["name"].lower() for p in listed}
    print("core-only venv, pip list:", ", ".join(f"{p['name']} {p['version']}" for p in listed))
    assert {"kvsim", "numpy"} <= names
    assert not names & {"mlx", "mlx-cpu", "mlx-metal", "matplotlib", "ipywidgets", "jupyterlab"}, names

    kvsim = str(Path(py).parent / "kvsim")
    calc = run([kvsim, "calc", "llama-3-8b"])
    assert calc.returncode == 0, calc.stderr
    assert "bytes per token                      131,072 B" in calc.stdout, calc.stdout  # 32 layers 8 heads 128 K+V bf16
    comp = run([kvsim, "compare", "llama-3-8b", "deepseek-v3", "--tokens", "32768"])
    assert comp.returncode == 0, comp.stderr
    assert "llama-3-8b" in comp.stdout and "deepseek-v3" in comp.stdout

    # the installed package, not this checkout (cwd is tmp_path): an MLX folder stops at the one line
    proc = _python("import kvsim, kvsim.cache", python=py, cwd=tmp_path, env=env)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "ImportError: " + missing_mlx_message("kvsim.cache", "No module named 'mlx'")), proc.stderr
    where = _python("import kvsim; print(kvsim.__file__)", python=py, cwd=tmp_path, env=env).stdout.strip()
    assert Path(where).is_relative_to(Path(py).parents[1]), where  # inside the venv, not this checkout
