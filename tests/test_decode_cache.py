"""The decoding cache allocated once (qval.decode_cache): the same numbers as transformers' concatenating cache."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from qval.decode_cache import DecodeLayer, decode_cache


def kv(length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(1, 2, length, 4, generator=gen), torch.randn(1, 2, length, 4, generator=gen)


def test_prompts_are_left_padded_with_zeros_and_tokens_appended_after_them() -> None:
    short, long = kv(3, 1), kv(5, 2)
    layer = DecodeLayer([short, long], capacity=7)
    assert layer.get_seq_length() == 5 and layer.keys.shape == (2, 2, 5, 4)
    assert torch.equal(layer.keys[0, :, :2], torch.zeros(2, 2, 4)) and torch.equal(layer.keys[0, :, 2:], short[0][0])
    assert torch.equal(layer.values[1], long[1][0])
    step = kv(1, 3)
    keys, values = layer.update(torch.cat([step[0], step[0]]), torch.cat([step[1], step[1]]))
    assert keys.shape == (2, 2, 6, 4) and torch.equal(values[1, :, 5], step[1][0, :, 0])
    layer.batch_select_indices(torch.tensor([1]))
    assert torch.equal(layer.keys[0, :, :5], long[0][0]) and layer.get_seq_length() == 6
    layer.update(*kv(1, 4))
    with pytest.raises(ValueError, match="holds 7 positions; 8 were asked for"):
        layer.update(*kv(1, 5))
    with pytest.raises(ValueError, match="capacity 4 is shorter than the 5 prompt positions"):
        DecodeLayer([long], capacity=4)


def test_a_model_decodes_the_same_floats_as_with_the_concatenating_cache(tiny_model: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_model, local_files_only=True).eval()
    prompt = torch.randint(3, model.config.vocab_size, (2, 11), generator=torch.Generator().manual_seed(0))
    runs = []
    with torch.no_grad():
        for allocated_once in (False, True):
            out = model(prompt, use_cache=True)
            cache = out.past_key_values
            assert isinstance(cache, DynamicCache)  # transformers' own: concatenates at every step
            if allocated_once:
                cache = decode_cache([[(layer.keys[row:row + 1], layer.values[row:row + 1]) for layer in cache.layers]
                                      for row in range(2)], capacity=11 + 6)
            token, position, logits = out.logits[:, -1:].argmax(-1), torch.full((2, 1), 11), []
            for _ in range(6):
                out = model(token, position_ids=position, past_key_values=cache, use_cache=True)
                logits.append(out.logits[:, -1])
                token, position = out.logits[:, -1:].argmax(-1), position + 1
            runs.append(torch.stack(logits))
    assert torch.equal(runs[0], runs[1])
