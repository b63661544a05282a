"""LoRA / QLoRA: trainable counts against peft itself (models built on the meta device from guard's presets),
4-bit and 8-bit storage against bitsandbytes on CPU, and hand counts."""

from __future__ import annotations

import json

import pytest

from guard.job import presets
from guard.job.adapter import Adapter, resolve_targets, trainable_count
from guard.job.training_job import new_job
from guard.memory import quantized

# (preset, rank, targets as a config writes them)
CASES = [("llama-3-8b", 16, "all"), ("mistral-7b", 8, None), ("qwen2.5-7b", 64, "all"),
         ("qwen3-8b", 8, "q_proj,v_proj"), ("llama-2-7b", 32, ["q_proj", "k_proj", "v_proj", "o_proj"])]


def _adapter(arch, rank: int, written) -> Adapter:
    targets, unknown = resolve_targets(written, arch)
    assert not unknown
    return Adapter("lora", rank, 2 * rank, 0.0, targets)


def test_llama3_8b_rank16_all_linear_by_hand():
    """r x (in + out) per module: q 4096+4096, k 4096+1024, v 4096+1024, o 4096+4096, gate and up
    4096+14336, down 14336+4096 = 81,920 per layer; x 16 x 32 layers."""
    arch = presets.load("llama-3-8b")
    assert trainable_count(_adapter(arch, 16, "all"), arch) == 81_920 * 16 * 32 == 41_943_040


@pytest.mark.parametrize("preset,rank,written", CASES)
def test_trainable_count_matches_peft(preset, rank, written):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    data = json.loads((presets.folder() / f"{preset}.json").read_text())
    data.pop("_guard", None)
    config = transformers.AutoConfig.for_model(**data)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    targets = "all-linear" if written == "all" else written.split(",") if isinstance(written, str) else written
    lora = peft.get_peft_model(model, peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets,
                                                      task_type="CAUSAL_LM"))
    trainable, total = lora.get_nb_trainable_parameters()
    arch = presets.load(preset)
    assert trainable_count(_adapter(arch, rank, written), arch) == trainable
    assert total - trainable == sum(p.numel() for p in model.parameters() if not p.requires_grad)


def _stored_bytes(*tensors) -> int:
    seen, total = set(), 0
    for tensor in tensors:
        key = tensor.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            total += tensor.untyped_storage().nbytes()
    return total


@pytest.mark.parametrize("fan_in,fan_out", [(256, 688), (4096, 1024), (100, 30)])
@pytest.mark.parametrize("double_quant", [True, False])
def test_four_bit_storage_matches_bitsandbytes(fan_in, fan_out, double_quant):
    torch = pytest.importorskip("torch")
    bnb = pytest.importorskip("bitsandbytes")
    weight = bnb.nn.Params4bit(torch.randn(fan_out, fan_in), requires_grad=False,
                               compress_statistics=double_quant, quant_type="nf4")._quantize("cpu")
    state = weight.quant_state
    parts = [weight, state.absmax, state.code]
    if double_quant:
        parts += [state.offset, state.state2.absmax, state.state2.code]
    assert _stored_bytes(*parts) == quantized.weight_bytes(4, fan_in, fan_out, double_quant)


def test_eight_bit_storage_matches_bitsandbytes():
    torch = pytest.importorskip("torch")
    bnb = pytest.importorskip("bitsandbytes")
    weight = bnb.nn.Int8Params(torch.randn(688, 256).half(), requires_grad=False, has_fp16_weights=False)
    weight = weight._quantize("cpu")
    assert _stored_bytes(weight, weight.SCB) == quantized.weight_bytes(8, 256, 688, True)


def test_four_bit_double_quant_by_hand():
    """688 x 256 = 176,128 weights: 88,064 packed bytes, 2,752 uint8 absmax, 11 fp32 nested absmax, the fp32
    offset, 256 + 16 fp32 code entries."""
    assert quantized.four_bit_bytes(176_128, True) == 88_064 + 2_752 + 44 + 4 + 1024 + 64


def test_four_bit_backward_rebuilds_the_weight_in_the_compute_dtype():
    """What MatMul4Bit's backward allocates, on CPU: the nested absmax dequantized to fp32, then the whole weight
    [out, in] in the compute dtype; guard's working set is their sum for the largest layer."""
    torch = pytest.importorskip("torch")
    bnb = pytest.importorskip("bitsandbytes")
    from bitsandbytes import functional

    weight = bnb.nn.Params4bit(torch.randn(688, 256), requires_grad=False, compress_statistics=True,
                               quant_type="nf4", quant_storage=torch.uint8)._quantize("cpu")
    state = weight.quant_state
    state.dtype = torch.bfloat16
    rebuilt = functional.dequantize_4bit(weight, state)
    absmax = functional.dequantize_blockwise(state.absmax, state.state2)
    assert rebuilt.shape == (688, 256) and rebuilt.dtype == torch.bfloat16
    seen = rebuilt.untyped_storage().nbytes() + absmax.untyped_storage().nbytes()
    arch = presets.load("llama-3-8b")
    job = new_job(arch, "deepspeed", world_size=1, seq_length=1024, micro_batch=1, params_dtype="bf16",
                  eager=True, adapter=Adapter("qlora", 8, 16, 0.0, ("q_proj",), quant_bits=4, double_quant=True))
    # the same two allocations for Llama-3-8B's largest layer, 4096 x 14336
    assert seen == 2 * 688 * 256 + 4 * (688 * 256 // 64)
    assert quantized.working_set(job) == 2 * 4096 * 14336 + 4 * (4096 * 14336 // 64)
