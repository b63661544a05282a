"""Model presets against the parameter counts their publishers state (model cards, papers)."""

from __future__ import annotations

import pytest

from guard.job import presets
from guard.memory.params import model_param_count

# name: (published total parameters, relative tolerance of the published figure's rounding)
PUBLISHED = {
    "llama-2-7b": (6_738_415_616, 0), "llama-2-13b": (13_015_864_320, 0), "llama-2-70b": (68_976_648_192, 0),
    "llama-3-8b": (8_030_261_248, 0), "llama-3-70b": (70.6e9, 0.002), "llama-3.1-405b": (405.9e9, 0.001),
    "mistral-7b": (7_241_732_096, 0), "mixtral-8x7b": (46_702_792_704, 0), "mixtral-8x22b": (141e9, 0.005),
    "qwen2.5-7b": (7.61e9, 0.002), "qwen2.5-14b": (14.7e9, 0.01), "qwen2.5-32b": (32.5e9, 0.01),
    "qwen2.5-72b": (72.7e9, 0.002), "qwen3-8b": (8.2e9, 0.005), "qwen3-30b-a3b": (30.5e9, 0.005),
    "deepseek-moe-16b": (16.4e9, 0.01), "gpt2": (124_439_808, 0), "gpt-neox-20b": (20_554_567_680, 0),
    "falcon-7b": (6_921_720_704, 0),
    # GPT-3 Table 2.1 (rounded names) and PTD-P's 175B / 530B / 1T rows (Narayanan et al. 2021, Table 1)
    "gpt3-125m": (125e6, 0.01), "gpt3-350m": (350e6, 0.02), "gpt3-760m": (760e6, 0.01), "gpt3-1.3b": (1.3e9, 0.02),
    "gpt3-2.7b": (2.7e9, 0.02), "gpt3-6.7b": (6.7e9, 0.01), "gpt3-13b": (13e9, 0.01), "gpt3-175b": (175e9, 0.005),
    "korthikanti-22b": (22e9, 0.01), "korthikanti-175b": (175e9, 0.005), "korthikanti-530b": (529.6e9, 0.0005),
    "korthikanti-1t": (1008.0e9, 0.0005),
}


def test_every_preset_is_checked():
    assert set(presets.names()) == set(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_preset_parameter_count(name):
    expected, tolerance = PUBLISHED[name]
    arch = presets.load(name)
    assert arch.source.startswith("https://")
    got = model_param_count(arch)
    assert got == pytest.approx(expected, rel=tolerance, abs=0 if tolerance else 0), (name, got)
