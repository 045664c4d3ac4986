"""Measured bytes of transformers' own caches: run ``generate`` on a model and sum what its cache holds.

Contract
- :func:`tiny_model` builds a random-weight transformers causal LM from a config dict (the keys a
  checkpoint's config.json writes), through ``AutoConfig.for_model`` and
  ``AutoModelForCausalLM.from_config``: never a download.
- :func:`run_generate` feeds a P-token prompt and D decode steps as ``generate`` does
  (``max_new_tokens = D + 1``, greedy: the last generated token is never fed), with the default
  ``DynamicCache``, ``cache_implementation="static"``, or a ``StaticCache`` of ``max_cache_len`` slots
  passed in, and returns the model's cache (None when
  the config says ``use_cache: false``).
- :func:`layer_bytes` sums numel × element_size over the tensors one cache layer holds (``keys``,
  ``values``, ``indexer_keys`` (``idx_keys`` on MiniMax-M3), every ``conv_states`` / ``recurrent_states`` entry, and DeepSeek-V4's
  compressor dicts ``buffer_kv`` / ``buffer_gate`` / ``compressed_kv`` / ``overlap_kv`` / ``overlap_gate``);
  a tensor held twice (V4's ``values`` *is* its ``keys``) counts once; 0-dim bookkeeping scalars are not cache data. :func:`layer_storage_bytes` sums the storages those
  tensors pin (a sliding slice is a view over a larger concatenation). RecurrentGemma keeps its
  state on its modules: :func:`module_state_bytes` reads ``conv1d_state`` and ``recurrent_states``.
  MiniMax keeps its lightning-attention state beside the layers, in ``MiniMaxCache.linear_cache``, and
  appends cache layers only up to its last attention layer: :func:`decoder_layer_rows` gives one row
  per decoder layer with that state counted. RWKV has no Cache: ``generate`` carries five (B, hidden, layers)
  tensors in its model kwargs, so :func:`rwkv_state_rows` feeds the prompt and the decode steps through the
  model's forward as ``generate`` does (greedy) and measures the state it returns, per layer.
- torch and transformers are imported inside these functions; what they return is measured,
  never computed (the prediction is :mod:`kvsim.calc.engines_transformers`').
"""

from __future__ import annotations

TENSOR_FIELDS = ("keys", "values", "indexer_keys", "idx_keys")  # idx_keys: MiniMax-M3's sparse layers
STATE_FIELDS = ("conv_states", "recurrent_states",
                # DeepSeek-V4's DeepseekV4HCACache / DeepseekV4CSACache: one tensor per compressor ("compressor",
                # "indexer") in each dict
                "buffer_kv", "buffer_gate", "compressed_kv", "overlap_kv", "overlap_gate")
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def tiny_model(cfg: dict, dtype: str = "fp32", seed: int = 0):
    """A random-weight causal LM of ``cfg`` (a config.json dict) in ``dtype``, in eval mode."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    args = {k: v for k, v in cfg.items() if k != "model_type"}
    config = AutoConfig.for_model(cfg["model_type"], **args)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, TORCH_DTYPES[dtype]))
    return model.eval()


def run_generate(model, prompt_tokens: int, decode_steps: int, cache: str = "dynamic", max_cache_len=None):
    """The cache ``generate`` leaves after a P-token prompt and D decode steps (greedy)."""
    import torch

    vocab = model.config.get_text_config().vocab_size
    ids = torch.arange(prompt_tokens).remainder(vocab - 1).add(1).unsqueeze(0)
    kwargs = dict(max_new_tokens=decode_steps + 1, min_new_tokens=decode_steps + 1, do_sample=False,
                  return_dict_in_generate=True, attention_mask=torch.ones_like(ids), pad_token_id=0)
    if cache == "static" and max_cache_len is None:  # generate sizes it: P + max_new_tokens − 1 slots
        kwargs["cache_implementation"] = "static"
    elif cache == "static":
        from transformers import StaticCache
        kwargs["cache"] = StaticCache(config=model.config, max_cache_len=max_cache_len)
    with torch.no_grad():
        out = model.generate(ids, **kwargs)
    return out.past_key_values


def layer_tensors(layer) -> list:
    """The tensors one cache layer holds (0-dim bookkeeping scalars left out)."""
    import torch

    out = [getattr(layer, name, None) for name in TENSOR_FIELDS]
    for name in STATE_FIELDS:
        states = getattr(layer, name, None) or {}
        out.extend(states.values() if isinstance(states, dict) else states)
    distinct = {id(t): t for t in out if isinstance(t, torch.Tensor) and t.dim() > 0}  # values is keys: once
    return list(distinct.values())


def layer_bytes(layer) -> int:
    """Σ numel × element_size over the layer's tensors: the bytes its views hold."""
    return sum(t.numel() * t.element_size() for t in layer_tensors(layer))


def layer_storage_bytes(layer) -> int:
    """Bytes of the distinct storages the layer's tensors pin (≥ the view bytes)."""
    seen = {}
    for t in layer_tensors(layer):
        s = t.untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def cache_layers(cache) -> list:
    """The per-layer objects of a transformers cache (empty for None)."""
    return [] if cache is None else list(cache.layers)


def module_state_bytes(model) -> list[tuple[int, int]]:
    """RecurrentGemma: (view bytes, storage bytes) per decoder layer of the state kept on its modules."""
    import torch

    rows = []
    for block in model.model.layers:
        mixer = getattr(block, "temporal_block", None)
        ts = [getattr(mixer, "conv1d_state", None), getattr(getattr(mixer, "rg_lru", None), "recurrent_states", None)]
        ts = [t for t in ts if isinstance(t, torch.Tensor)]
        rows.append((sum(t.numel() * t.element_size() for t in ts),
                     sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in ts}.values())))
    return rows


LINEAR_CACHE = "MiniMaxCache.linear_cache"


def decoder_layer_rows(cache, num_layers: int) -> list[tuple[str, int, int]]:
    """(class, view bytes, storage bytes) per decoder layer; a MiniMax ``linear_cache`` entry counts as
    that layer's state (class ``MiniMaxCache.linear_cache``), a layer the cache never appended as 0 B."""
    import torch

    layers = cache_layers(cache)
    linear = list(getattr(cache, "linear_cache", None) or [])
    rows = []
    for i in range(num_layers):
        state = linear[i] if i < len(linear) and isinstance(linear[i], torch.Tensor) else None
        if state is not None:
            view = state.numel() * state.element_size()
            rows.append((LINEAR_CACHE, view, view + (layer_bytes(layers[i]) if i < len(layers) else 0)))
        elif i < len(layers):
            rows.append((type(layers[i]).__name__, layer_bytes(layers[i]), layer_storage_bytes(layers[i])))
        else:
            rows.append(("", 0, 0))
    return rows


RWKV_STATE = "model_kwargs['state']"


def rwkv_state_rows(model, prompt_tokens: int, decode_steps: int) -> list[tuple[str, int, int]]:
    """(class, view bytes, storage bytes) per RWKV layer: the layer's slice of each of the five state tensors
    after a P-token prompt and D greedy one-token calls (what generate's model_kwargs['state'] holds)."""
    import torch

    vocab = model.config.vocab_size
    ids = torch.arange(prompt_tokens).remainder(vocab - 1).add(1).unsqueeze(0)
    with torch.no_grad():
        out = model(ids, use_cache=True)
        for _ in range(decode_steps):
            out = model(out.logits[:, -1:].argmax(-1), state=out.state, use_cache=True)
    rows = []
    for i in range(model.config.num_hidden_layers):
        view = sum(s[:, :, i].numel() * s.element_size() for s in out.state)
        rows.append((RWKV_STATE, view, view))  # one layer's share of the stacked state
    return rows
