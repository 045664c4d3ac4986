"""kvsim.calc.progress: a progress line whose final state is plain text, in a terminal and in a notebook."""

import gc
import re

import pytest

from kvsim.calc.progress import Progress, progress

FINAL = re.compile(r"^demo: 3/3 steps in \d+\.\d s(, .*)?$")


def test_iterating_yields_everything_and_leaves_one_final_line(capsys):
    assert list(progress(range(3), desc="demo")) == [0, 1, 2]
    out, err = capsys.readouterr()
    assert out == "" and FINAL.match(err.strip()) and err.count("\n") == 1  # not a TTY: no live updates


def test_counting_updates_with_a_note(capsys):
    with Progress(total=3, desc="demo", unit="steps") as bar:
        for _ in range(3):
            bar.update(1)
        bar.set_postfix_str("last run")
        assert bar.line() == "demo: 3/3 steps (100 %), last run"
    err = capsys.readouterr().err.strip()
    assert FINAL.match(err) and err.endswith(", last run")


def test_closing_twice_writes_once_and_disabled_writes_nothing(capsys):
    bar = progress(total=1, desc="demo")
    bar.close()
    bar.close()
    list(progress(range(5), desc="quiet", enabled=False))
    assert capsys.readouterr().err.count("\n") == 1


def test_a_loop_left_early_still_ends_its_line(capsys):
    for i in progress(range(10), desc="demo"):
        if i == 2:
            break
    gc.collect()  # the generator's finally runs when it is collected
    assert "demo: 2/10 steps in" in capsys.readouterr().err


def test_in_a_notebook_the_stored_output_is_the_final_line():
    # a live display that ends empty, then the final line on stdout: what GitHub, nbviewer and nbval see
    import nbformat  # here, not at the top: ~3 CPU-s per worker that never runs this test
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import time\nfrom kvsim.calc.progress import progress\n"
        "for _ in progress(range(3), desc='demo'):\n    time.sleep(0.25)")])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    outputs = nb.cells[0].outputs
    assert [o.output_type for o in outputs] == ["display_data", "stream"]
    assert outputs[0].data == {"text/plain": ""}  # updated live while running, emptied at the end
    assert outputs[1].name == "stdout" and FINAL.match(outputs[1].text.strip())
