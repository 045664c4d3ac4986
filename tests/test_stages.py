"""`make test`'s stages between them run every test: no mark is stranded outside the files its stage collects.

The engines and env stages collect only the files named in the Makefile (ENGINES_FILES, ENV_FILES), and the unit
stage ignores tests/ui, to spare every pytest process the import of modules it would only deselect. So a test
marked `engines` or `slow` anywhere else would be deselected by the unit stage and never collected by its own:
these tests read the marks in the source (cheap: no collection) and fail on such a test.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def makefile_vars() -> dict[str, str]:
    """NAME := value assignments of the Makefile, with $(NAME) references and $(addprefix ...) expanded."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Makefile").read_text())  # a value continued over lines: one line
    raw = dict(re.findall(r"^([A-Z_]+)\s*:=\s*(.*?)\s*$", text, re.M))

    def expand(value, depth=0):
        assert depth < 10, f"recursive Makefile variable: {value}"
        return re.sub(r"\$\(([A-Z_]+)\)",
                      lambda m: expand(raw[m.group(1)], depth + 1) if m.group(1) in raw else m.group(0), value)

    def functions(value):  # the one make function the stages use: $(addprefix P,WORDS)
        return re.sub(r"\$\(addprefix ([^,()]*),([^()]*)\)", lambda m: " ".join(m.group(1) + w for w in m.group(2).split()),
                      value)

    return {name: functions(expand(value)) for name, value in raw.items()}


def files_marked(mark: str, root: Path = ROOT) -> set[str]:
    """Test files under root/tests (relative to root) that apply `mark` (a decorator or a module's pytestmark)."""
    pattern = re.compile(rf"\bmark\.{mark}\b")
    return {str(p.relative_to(root)) for p in (root / "tests").rglob("*.py") if pattern.search(p.read_text())}


@pytest.mark.parametrize("mark, files_var", [("engines", "ENGINES_FILES"), ("slow", "ENV_FILES")])
def test_every_marked_file_is_collected_by_its_stage(mark, files_var):
    stage_files = set(makefile_vars()[files_var].split())
    marked = files_marked(mark)
    assert marked <= stage_files, f"marked {mark!r} but not in {files_var}: {sorted(marked - stage_files)}"
    assert all((ROOT / f).exists() for f in stage_files), f"{files_var} names a missing file"


def test_every_file_the_unit_stage_ignores_runs_in_another_stage():
    # The unit stage skips collecting some files to spare its workers their imports: ENGINES_FILES (mlx-lm,
    # transformers, torch) and NB_TEST_FILES (nbformat). That loses no test only if each engine file marks all of
    # its tests `engines` with a module-level pytestmark, and the notebook test files run in the nbval stage.
    v = makefile_vars()
    ignored = {a.removeprefix("--ignore=") for a in v["UNIT_ARGS"].split() if a.startswith("--ignore=")}
    assert ignored == {"tests/ui", *v["ENGINES_FILES"].split(), *v["NB_TEST_FILES"].split()}
    for f in v["ENGINES_FILES"].split():
        assert re.search(r"^pytestmark = pytest\.mark\.engines$", (ROOT / f).read_text(), re.M), f
    assert set(v["NB_TEST_FILES"].split()) <= set(v["NBVAL_ARGS"].split())


def test_ui_tests_live_only_under_tests_ui():
    assert {f for f in files_marked("ui") if not f.startswith("tests/ui/")} == set()


def test_the_stage_arguments_use_their_file_lists():
    v = makefile_vars()
    assert v["ENGINES_ARGS"].startswith(v["ENGINES_FILES"] + " ")
    assert v["ENV_ARGS"].startswith(v["ENV_FILES"] + " ")
    assert "--ignore=tests/ui" in v["UNIT_ARGS"].split()


def test_the_check_finds_a_stranded_mark(tmp_path):
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    mark = "pytest.mark."  # spelled apart, so that this file does not carry the marks it writes
    (tmp_path / "tests" / "sub" / "test_x.py").write_text(f"import pytest\n\n\n@{mark}engines\ndef test_x():\n    pass\n")
    (tmp_path / "tests" / "test_y.py").write_text(f"import pytest\npytestmark = {mark}slow\n")
    assert files_marked("engines", tmp_path) == {"tests/sub/test_x.py"}
    assert files_marked("slow", tmp_path) == {"tests/test_y.py"}
    assert files_marked("ui", tmp_path) == set()
