"""Hostile inputs to `kvsim measure`, which runs mlx-lm's own model and caches: bad files are one line (exit 2,
no traceback), a FIFO is refused at once. It imports mlx-lm (and through it transformers and torch), so it runs in
make test's engines stage beside the other mlx-lm tests; the rest of the hostile inputs: tests/test_hostile_inputs.py.
"""

import os

import pytest
from test_hostile_inputs import _deadline, _refused, _write

# the engines stage collects this file; the unit stage ignores it (tests/test_stages.py)
pytestmark = pytest.mark.engines


def test_a_fifo_is_refused_at_once(tmp_path, capsys):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    pytest.importorskip("mlx_lm.generate")  # imported before the deadline: a slow import is no hang
    pytest.importorskip("mlx_lm.utils")
    with _deadline(10):
        _refused(capsys, "measure", fifo, needle="is not a regular file")


def _tiny_llama():
    return {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 1, "rms_norm_eps": 1e-5,
            "vocab_size": 64, "tie_word_embeddings": False, "rope_theta": 10000.0,
            "max_position_embeddings": 4096}


def test_measure_bad_files_are_one_line(tmp_path, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    _write(folder, _tiny_llama())
    (folder / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    _refused(capsys, "measure", folder, "--prompt-tokens", 4, needle="safetensors header is not valid JSON")
    (folder / "model.safetensors").write_bytes(b"\x00" * 5)
    _refused(capsys, "measure", folder, "--prompt-tokens", 4, needle="is truncated")
    missing = {k: v for k, v in _tiny_llama().items() if k != "intermediate_size"}
    _refused(capsys, "measure", _write(tmp_path, missing), "--prompt-tokens", 4, needle="mlx-lm cannot build 'llama'")
    # kvsim reads gpt2 (and an unknown type with the standard keys, as full attention); mlx-lm's refusal is one line
    _refused(capsys, "measure", _write(tmp_path, {**_tiny_llama(), "model_type": "gpt2"}), "--prompt-tokens", 4,
             needle="mlx-lm cannot build 'gpt2'")
    _refused(capsys, "measure", _write(tmp_path, {**_tiny_llama(), "model_type": "no_such_arch"}), "--prompt-tokens",
             4, needle="no_such_arch")
    _refused(capsys, "measure", _write(tmp_path, {**_tiny_llama(), "num_key_value_heads": 3}),
             needle="num_key_value_heads 3 must divide")
    _refused(capsys, "measure", _write(tmp_path, _tiny_llama()), "--prompt-tokens", 4, "--decode-steps", 10**12,
             needle="accepted: at most 100000 calls")
    huge = {**_tiny_llama(), "intermediate_size": 2**26}  # 24 GiB of random MLP weights
    _refused(capsys, "measure", _write(tmp_path, huge), "--prompt-tokens", 4, needle="random weights of")
