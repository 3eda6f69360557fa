"""transformers' DynamicSlidingWindowLayer with sliding_window = 1: what the cache keeps and
what it tells the mask builder (run with the hf venv: build/hf-venv/bin/python THIS).

A window of 1 key is the query's own token. The layer keeps `keys[:, :, -sliding_window + 1:]`
(cache_utils.py, DynamicSlidingWindowLayer.update), which for sliding_window = 1 is `[-0:]`,
i.e. every token, while get_mask_sizes reports sliding_window - 1 + q_length keys. The mask is
sized for q_length keys, the attention function gets every cached key."""
import torch
from transformers import MistralConfig
from transformers.cache_utils import DynamicCache

cfg = MistralConfig(hidden_size=32, num_attention_heads=2, num_key_value_heads=2, head_dim=16,
                    num_hidden_layers=1, sliding_window=1, intermediate_size=32, vocab_size=32)
for past, step in ((11, 1), (8, 4)):
    cache = DynamicCache(config=cfg)
    k = torch.randn(1, 2, past + step, 16)
    cache.update(k[:, :, :past], k[:, :, :past], 0)
    kv_length, kv_offset = cache.get_mask_sizes(step, 0)
    keys, _ = cache.update(k[:, :, past:], k[:, :, past:], 0)
    print(f"sliding_window=1, {past} cached then {step}: get_mask_sizes -> kv_length "
          f"{kv_length}, kv_offset {kv_offset}; update returns {keys.shape[2]} keys")
