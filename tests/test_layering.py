"""The layers flow one way: the pure modules import no MLX, and nothing imports a higher layer."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PURE = ["kvsim", "kvsim.config", "kvsim.memory", "kvsim.capacity", "kvsim.explain", "kvsim.variants",
        "kvsim.registry", "kvsim.weights", "kvsim.hardware", "kvsim.tables", "kvsim.blocks", "kvsim.sim", "kvsim.cli"]


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_do_not_load_mlx(module):
    code = f"import sys, {module}; sys.exit(1 if any(m == 'mlx' or m.startswith('mlx.') for m in sys.modules) else 0)"
    assert subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1]).returncode == 0, \
        f"{module} imports MLX"


# a module may import only from its own layer or lower ones
RANK = {"config": 0, "memory": 1, "variants": 1, "weights": 1, "hardware": 1, "registry": 1, "tables": 1,
        "bandwidth": 1, "capacity": 2, "explain": 2, "windows": 2, "hybrid": 2, "techniques": 2, "blocks": 2,
        "cache": 3, "attention": 3, "ringview": 4, "quantization": 4, "paged_check": 4, "blockview": 4,
        "model": 4, "decode": 5, "growth": 6, "sim": 5, "serving": 5, "fragmentation": 6, "cli": 6,
        "plots": 7, "widgets": 8}


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    depth = len(path.relative_to(Path(__file__).parents[1] / "kvsim").parts)  # 1 = kvsim/x.py
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            if node.level < depth:
                continue  # a sibling inside the same subpackage
            if node.module:
                yield node.module.split(".")[0]
            else:
                yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kvsim."):
            yield node.module.split(".")[1]


def test_no_module_imports_a_higher_layer():
    root = Path(__file__).parents[1] / "kvsim"
    bad = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).parts
        own = rel[0].removesuffix(".py")
        if own == "__init__":
            continue
        assert own in RANK, f"kvsim/{rel[0]} has no layer in RANK: add it"
        for target in _imports(path):
            if target in RANK and RANK[target] > RANK[own]:
                bad.append(f"{'/'.join(rel)} imports {target}")
    assert not bad, bad
