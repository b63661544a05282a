"""TRL's preference and RL trainers priced as they allocate (trl f2cd5771): DPO's reference model (a whole copy on
every rank below ZeRO-3, sharded like the policy under ZeRO-3, none with peft or precomputed log-probs), its
chosen and rejected rows in one forward, GRPO/RLOO's reference by beta, a colocated vLLM's share; LLaMA-Factory's
and axolotl's DPO/KTO/ORPO/SimPO through the TRL trainers they subclass, their PPO/RM/GRPO named. Expected bytes are counted by hand from the trainers' code and the model's
published parameter count."""

from __future__ import annotations

import json

import pytest

from conftest import run_guard

QWEN_PARAMS = 494_032_768  # Qwen2.5-0.5B, tied embeddings (its safetensors' total, the catalog's published count)
H100_TOTAL = 80 * 2**30  # the catalog's H100 memory; vLLM's share is of the GPU's total memory
ZERO = {2: {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "bf16": {"enabled": "auto"}, "gradient_clipping": 1.0, "zero_optimization": {"stage": 2}},
        3: {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "bf16": {"enabled": "auto"}, "gradient_clipping": 1.0,
            "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}}}
BASE = ("--model_name_or_path Qwen/Qwen2.5-0.5B --dataset_name d --per_device_train_batch_size 2 --max_length 1024 "
        "--output_dir out --num_processes 4 --deepspeed ds.json")


def _estimate(tmp_path, command: str, stage: int = 2, gpu: str | None = None) -> dict:
    (tmp_path / "ds.json").write_text(json.dumps(ZERO[stage]))
    script = tmp_path / "run.sh"
    script.write_text(command + "\n")
    code, out, err = run_guard("estimate", str(script), "--format", "json", *(["--gpu", gpu] if gpu else []))
    assert code in (0, 1), out + err
    return json.loads(out)


def _components(data: dict) -> dict:
    return data["ranks"][0]["components"]


def test_dpo_under_zero2_keeps_a_whole_bf16_reference_on_every_rank(tmp_path):
    """prepare_deepspeed forces stage 0 below ZeRO-3: 494,032,768 parameters x 2 bytes (the engine's bf16)."""
    dpo = _components(_estimate(tmp_path, f"trl dpo {BASE}"))
    assert dpo["reference"] == QWEN_PARAMS * 2


def test_dpo_runs_chosen_and_rejected_in_one_forward(tmp_path):
    """concatenated_forward: the same micro-batch's activations and logits, twice the rows."""
    sft = _components(_estimate(tmp_path, f"trl sft {BASE}"))
    dpo = _components(_estimate(tmp_path, f"trl dpo {BASE}"))
    assert "reference" not in sft
    assert dpo["activations"] == 2 * sft["activations"] and dpo["logits"] == 2 * sft["logits"]
    assert dpo["params"] == sft["params"] and dpo["optimizer"] == sft["optimizer"]


def test_dpo_under_zero3_shards_the_reference_like_the_policy(tmp_path):
    comps = _components(_estimate(tmp_path, f"trl dpo {BASE}", stage=3))
    assert comps["reference"] == comps["params"]


@pytest.mark.parametrize("flags", ["--use_peft", "--precompute_ref_log_probs"])
def test_dpo_without_a_reference_copy(tmp_path, flags):
    """peft: the reference is the policy with adapters disabled; precomputed log-probs: no model kept."""
    data = _estimate(tmp_path, f"trl dpo {BASE} {flags}")
    assert "reference" not in _components(data)
    assert any(("adapters disabled" if "peft" in flags else "precompute_ref_log_probs") in n for n in data["notes"])


@pytest.mark.parametrize(("method", "beta", "held"), [("grpo", "", False), ("grpo", "--beta 0.04", True),
                                                      ("rloo", "", True), ("rloo", "--beta 0.0", False)])
def test_grpo_and_rloo_hold_a_reference_only_with_a_kl_term(tmp_path, method, beta, held):
    """GRPO's beta defaults to 0.0 and RLOO's to 0.05; beta 0 loads no reference."""
    comps = _components(_estimate(tmp_path, f"trl {method} {BASE} {beta}"))
    assert ("reference" in comps) is held
    if held:
        assert comps["reference"] == QWEN_PARAMS * 2


def test_a_colocated_vllm_holds_its_share_of_the_gpus_total(tmp_path):
    data = _estimate(tmp_path, f"trl grpo {BASE} --use_vllm --vllm_mode colocate --vllm_gpu_memory_utilization 0.97",
                     gpu="H100")
    comps = _components(data)
    assert comps["vllm_engine"] == round(0.97 * H100_TOTAL)
    # 77.6 GiB for vLLM, the bf16 weights (0.92 GiB) and a quarter of the fp32 master and moments (12 bytes x
    # 494M / 4 ranks = 1.38 GiB) already pass the H100's 79.11 usable GiB before any activation
    assert comps["vllm_engine"] + QWEN_PARAMS * 2 + QWEN_PARAMS * 12 / 4 > 79.11 * 2**30
    assert data["fits"] is False
    default = _components(_estimate(tmp_path, f"trl grpo {BASE} --use_vllm", gpu="H100"))
    assert default["vllm_engine"] == round(0.3 * H100_TOTAL)  # GRPOConfig: colocate, 0.3


@pytest.mark.parametrize("flags", ["--use_vllm --vllm_mode server", "--use_vllm --vllm_enable_sleep_mode"])
def test_vllm_on_other_gpus_or_asleep_holds_nothing_while_training(tmp_path, flags):
    assert "vllm_engine" not in _components(_estimate(tmp_path, f"trl grpo {BASE} {flags}", gpu="H100"))


def test_the_text_table_gains_a_column_per_extra_model_and_engine(tmp_path):
    (tmp_path / "ds.json").write_text(json.dumps(ZERO[2]))
    script = tmp_path / "run.sh"
    script.write_text(f"trl grpo {BASE} --beta 0.04 --use_vllm\n")
    code, out, err = run_guard("estimate", str(script), "--gpu", "H100")
    header = next(line for line in out.splitlines() if line.lstrip().startswith("ranks"))
    assert "ref model" in header and "vLLM" in header


LF_DPO = ("model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: dpo\nfinetuning_type: full\ncutoff_len: 1024\n"
          "per_device_train_batch_size: 2\nbf16: true\ndeepspeed: ds.json\n")
AXOLOTL_DPO = ("base_model: Qwen/Qwen2.5-0.5B\nrl: dpo\nsequence_len: 1024\nmicro_batch_size: 2\nbf16: true\n"
               "datasets: []\ndeepspeed: ds.json\n")


def _config(tmp_path, name: str, text: str) -> dict:
    (tmp_path / "ds.json").write_text(json.dumps(ZERO[2]))
    (tmp_path / name).write_text(text)
    code, out, err = run_guard("estimate", str(tmp_path / name), "--format", "json", "--world-size", "4")
    assert code == 0, out + err
    return json.loads(out)


@pytest.mark.parametrize(("name", "text"), [("lf.yaml", LF_DPO), ("axolotl.yaml", AXOLOTL_DPO)])
def test_llamafactory_and_axolotl_dpo_run_trls_reference_and_paired_rows(tmp_path, name, text):
    """Both subclass TRL's DPOTrainer and prepare the reference with its prepare_deepspeed: below ZeRO-3 a whole bf16
    copy (494,032,768 x 2 bytes) on every rank; chosen and rejected in one forward (twice SFT's activations)."""
    dpo = _config(tmp_path, name, text)
    sft = _config(tmp_path, "sft_" + name, text.replace("stage: dpo\n", "").replace("rl: dpo\n", ""))
    assert _components(dpo)["reference"] == QWEN_PARAMS * 2 and "reference" not in _components(sft)
    assert _components(dpo)["activations"] == 2 * _components(sft)["activations"]


@pytest.mark.parametrize(("change", "reference"), [
    ("finetuning_type: lora\n", None),  # create_ref_model: LoRA without ref_model -> the policy, adapters disabled
    ("finetuning_type: lora\nref_model: Qwen/Qwen2.5-0.5B\n", QWEN_PARAMS * 2),  # ref_model: loaded beside it
    ("pref_loss: orpo\n", None), ("pref_loss: simpo\n", None)])  # use_ref_model is False for these losses
def test_llamafactorys_reference_follows_its_finetuning_args(tmp_path, change, reference):
    comps = _components(_config(tmp_path, "lf.yaml", LF_DPO.replace("finetuning_type: full\n", "") + change))
    assert comps.get("reference") == reference


def test_llamafactorys_reference_forward_holds_fp32_logits(tmp_path):
    """concatenated_forward casts the reference's logits to fp32 and takes log_softmax of the copy: 8 bytes for each
    of 4 rows x 1024 tokens x 151,936 logits, beyond the gated MLP's no-grad working set."""
    from guard.memory.post_training import reference_forward_bytes

    (tmp_path / "ds.json").write_text(json.dumps(ZERO[2]))
    (tmp_path / "lf.yaml").write_text(LF_DPO)
    from guard.intake.read import read
    from guard.intake.request import Request
    from guard.settings import Settings

    job = read(Request(paths=(str(tmp_path / "lf.yaml"),)), Settings()).job
    assert reference_forward_bytes(job) == 4 * 1024 * VOCAB * 8


@pytest.mark.parametrize(("name", "text", "key"), [
    ("ppo.yaml", LF_DPO.replace("stage: dpo", "stage: ppo"), "stage"),
    ("grpo.yaml", AXOLOTL_DPO.replace("rl: dpo", "rl: grpo"), "rl")])
def test_the_stages_not_priced_are_named(tmp_path, name, text, key):
    unmodelled = _config(tmp_path, name, text)["unmodelled"]
    assert any(key in json.dumps(u) and "priced as SFT" in json.dumps(u) for u in unmodelled), unmodelled


def test_grpo_generating_with_transformers_holds_the_kv_cache_and_the_gathered_policy(tmp_path):
    """No vLLM: generate runs on the training GPU over the local generation batch (8 x 8 steps = 64 completions)
    with ZeRO-3's whole policy gathered (ds3_gather_for_generation). Llama-3-8B: K and V of 32 layers x 8 KV heads x
    128 dims in bf16 = 131,072 bytes a token; 1,024 tokens (TRL's default length as guard prices it) x 64
    completions = 8 GiB; the gathered weights are 8,030,261,248 x 2 bytes less the rank's own partition."""
    data = _estimate(tmp_path, "trl grpo --model_name_or_path meta-llama/Meta-Llama-3-8B --dataset_name d "
                               "--per_device_train_batch_size 8 --steps_per_generation 8 --num_processes 8 "
                               "--output_dir out --deepspeed ds.json", stage=3, gpu="H100")
    rank = data["ranks"][0]
    comps = rank["components"]
    assert rank["phase"] == "generation"
    assert comps["generation"] == 2 * 32 * 8 * 128 * 2 * 1024 * 64 + (8_030_261_248 * 2 - comps["params"])
    assert comps["activations"] == comps["logits"] == 0  # no training forward in flight while generating


@pytest.mark.parametrize(("command", "named"), [
    ("python3 -m openrlhf.cli.train_ppo_ray --actor_num_gpus_per_node 8 --vllm_num_engines 2 --colocate_all_models "
     "--pretrain meta-llama/Meta-Llama-3-8B", "OpenRLHF"),
    ("python3 -m verl.trainer.main_ppo data.train_batch_size=1024 actor_rollout_ref.model.path=Qwen/Qwen2.5-7B",
     "verl"),
    ("deepspeed --num_gpus 8 main.py --actor_model_name_or_path facebook/opt-1.3b --critic_model_name_or_path "
     "facebook/opt-350m --actor_zero_stage 2 --enable_hybrid_engine", "DeepSpeed-Chat step 3")])
def test_other_post_training_frameworks_are_named_not_priced(tmp_path, command, named):
    """Their jobs hold an actor, a reference, reward/critic models and generation engines: until guard reads them it
    says which framework it saw, instead of 'no Megatron program' or an SFT price (OpenRLHF's DPO is priced:
    tests/test_openrlhf.py)."""
    script = tmp_path / "run.sh"
    script.write_text(command + "\n")
    code, out, err = run_guard("estimate", str(script))
    assert code == 2 and named in err and "is not priced yet" in err and err.count("\n") == 1


# TRL 1.15+ scores through its fused LM head (trl/kernels/chunked_logprob.py ChunkedLogProbFunction), counted by
# hand from that code for Qwen2.5-0.5B (hidden 896, vocabulary 151,936) in bf16 under DeepSpeed
HIDDEN, VOCAB = 896, 151_936


def _job(tmp_path, command: str):
    from guard.intake.read import read
    from guard.intake.request import Request
    from guard.settings import Settings

    (tmp_path / "ds.json").write_text(json.dumps(ZERO[2]))
    script = tmp_path / "run.sh"
    script.write_text(command + "\n")
    return read(Request(paths=(str(script),)), Settings()).job


def _head(tmp_path, command: str):
    from guard.memory.chunked_head import chunked_head_bytes

    return chunked_head_bytes(_job(tmp_path, command))


def test_grpo_scores_the_completion_tokens_alone(tmp_path):
    """logits_to_keep: 2 rows x 512 completion tokens (max_completion_length's default) are scored, not the 1024 of
    the sequence; each keeps its bf16 hidden state (the masked copy), an int64 target and an fp32 log_z, and every
    position of the rows gets an fp32 log-prob."""
    kept_512, _ = _head(tmp_path, f"trl grpo {BASE}")
    kept_256, _ = _head(tmp_path, f"trl grpo {BASE} --max_completion_length 256")
    assert kept_512 == 2 * 512 * (2 * HIDDEN + 8 + 4) + 4 * 2 * 1023
    assert kept_512 - kept_256 == 2 * 256 * (2 * HIDDEN + 8 + 4)


def test_the_fused_heads_backward_holds_fp32_gradient_accumulators(tmp_path):
    """backward: one 1024 x 32768 bf16 tile, the hidden states' fp32 gradient and its bf16 cast, and the whole head's
    fp32 weight gradient and its bf16 cast; a LoRA policy's frozen head gets no weight gradient."""
    tile = 1024 * 32768 * 2
    _, full = _head(tmp_path, f"trl grpo {BASE}")
    assert full == tile + 1024 * HIDDEN * (4 + 2) + VOCAB * HIDDEN * (4 + 2)
    _, lora = _head(tmp_path, f"trl grpo {BASE} --use_peft")
    assert lora == tile + 1024 * HIDDEN * (4 + 2)


def test_dpo_scores_every_token_of_both_rows(tmp_path):
    """DPO masks the prompt but its length is the dataset's: chosen and rejected, 1024 tokens each, priced."""
    kept, _ = _head(tmp_path, f"trl dpo {BASE}")
    assert kept == 4 * 1024 * (2 * HIDDEN + 8 + 4) + 4 * 4 * 1023


def test_before_trl_1_15_the_whole_logits_are_priced(tmp_path, monkeypatch):
    from guard import installed

    monkeypatch.setattr(installed, "version", lambda dist: "1.14.0" if dist == "trl" else None)
    data = _estimate(tmp_path, f"trl grpo {BASE}")
    assert any("1.14.0 (installed) computes whole logits" in n for n in data["notes"])
    # eager transformers: the fp32 log-softmax kept beside the returned bf16 logits, 2 x 1024 x vocabulary each
    assert _components(data)["logits"] >= 2 * 1024 * VOCAB * (4 + 2)


def test_dpos_reference_forward_runs_while_the_policys_activations_are_held(tmp_path):
    """DPOTrainer._compute_loss runs the policy's forward, then the reference's under no_grad: its working set on top
    of everything the policy keeps. 4 rows x 1024 tokens: the fused head's 4096 x 32768 bf16 tile, seven fp32 values
    and the masked bf16 hidden copy per token (275,890,176 B) exceed the gated MLP's multiply (activation output, up
    and product, 3 x 4864, beside input and residual, 2 x 896: 134,217,728 B)."""
    from guard.memory.post_training import reference_forward_bytes

    tokens = 4 * 1024
    head = 4096 * 32768 * 2 + 7 * 4 * tokens + tokens * HIDDEN * 2
    assert reference_forward_bytes(_job(tmp_path, f"trl dpo {BASE}")) == head
    assert reference_forward_bytes(_job(tmp_path, f"trl dpo {BASE} --precompute_ref_log_probs")) == 0
    assert reference_forward_bytes(_job(tmp_path, f"trl dpo {BASE} --use_peft")) == head  # adapters disabled
    assert reference_forward_bytes(_job(tmp_path, f"trl grpo {BASE} --beta 0.04")) == 0  # scored before training
    phases = _estimate(tmp_path, f"trl dpo {BASE}")["ranks"][0]["phases"]
    assert set(phases) >= {"forward/backward", "optimizer step", "reference forward"}


def test_a_dpo_step_is_the_policy_over_both_rows_and_the_references_forward(tmp_path):
    """post_training_time: the policy trains on chosen and rejected (an SFT step of twice the micro-batch), and the
    reference runs the same forward without backward, once per micro-batch."""
    from guard.memory.catalog import lookup
    from guard.plan.hardware import hardware
    from guard.plan.step_time import step_time

    hw = hardware(lookup("H100"), "bf16")
    dpo = step_time(_job(tmp_path, f"trl dpo {BASE}"), hw)
    sft_twice = step_time(_job(tmp_path, f"trl sft {BASE}".replace("batch_size 2", "batch_size 4")), hw)
    forward = sum(sft_twice.stages[0].forward) * 1  # one micro-batch per step (no accumulation written)
    assert dpo.terms["reference forward (no grad)"] == pytest.approx(forward)
    assert dpo.seconds == pytest.approx(sft_twice.seconds + forward)
    grpo = step_time(_job(tmp_path, f"trl grpo {BASE}"), hw)  # beta 0: no reference, one row per completion
    assert "reference forward (no grad)" not in grpo.terms


def _plan(tmp_path, share: float):
    from guard.memory.catalog import lookup
    from guard.plan.search import plan

    (tmp_path / "ds.json").write_text(json.dumps(ZERO[2]))
    script = tmp_path / "run.sh"
    script.write_text("trl grpo --model_name_or_path meta-llama/Meta-Llama-3-8B --dataset_name d "
                      "--per_device_train_batch_size 4 --num_processes 8 --deepspeed ds.json --output_dir out "
                      f"--use_vllm --vllm_gpu_memory_utilization {share}\n")
    from guard.intake.read import read
    from guard.intake.request import Request
    from guard.settings import Settings

    gpu = lookup("H100")
    return plan(read(Request(paths=(str(script),)), Settings()).job, gpu), gpu


def test_the_planner_keeps_a_share_that_leaves_layouts_room(tmp_path):
    result, _ = _plan(tmp_path, 0.7)
    assert result.candidates and {c.job.post_training.vllm_share for c in result.candidates} == {0.7}


def test_the_planner_lowers_a_share_no_layout_fits_beside_never_below_the_engines_need(tmp_path):
    """0.92 of an H100 leaves 5.5 GiB of 79.1 usable: no ZeRO layout of an 8B policy fits. The planner gives each
    shown layout the most its peak leaves, largest first, and never less than vLLM's floor: the 16-bit weights
    (8,030,261,248 x 2) and one 1024-token sequence's K and V (2 x 32 layers x 8 KV heads x 128 x 2 bytes x 1024),
    16,194,740,224 B = 0.1885 of 80 GiB."""
    result, gpu = _plan(tmp_path, 0.92)
    shares = [c.job.post_training.vllm_share for c in result.candidates]
    assert shares and all(0.19 <= s < 0.92 for s in shares) and shares == sorted(shares, reverse=True)
    for cand in result.candidates:
        assert cand.estimate.peak_stage.peak_bytes <= result.capacity  # the engine at its share included
        assert cand.estimate.peak_stage.components["vllm_engine"] == round(cand.job.post_training.vllm_share
                                                                             * gpu.memory_bytes)


def test_a_bad_completion_length_is_a_located_one_line_error(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("trl grpo --model_name_or_path Qwen/Qwen2.5-0.5B --dataset_name d --max_completion_length abc "
                      "--output_dir o\n")
    code, out, err = run_guard("estimate", "--offline", str(script))
    assert code == 2 and err.count("\n") == 1 and "run.sh:1:90: max_completion_length is 'abc'" in err
