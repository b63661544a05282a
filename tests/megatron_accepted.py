"""Each error guard gives on a Megatron-LM command line megatron-core's TransformerConfig accepts, justified.

One row per (argument set, rule), named as test_megatron_core_oracle.argument_sets names them:
- `validate_args`: Megatron-LM's parse_args/validate_args refuses it before megatron-core sees it; the
  detail is a pattern on its refusal, reproduced by test_megatron_lm_oracle.py with a core_v0.16.1
  checkout (../shared/megatron-lm, or MEGATRON_LM_PATH). An empty AssertionError is a bare `assert` of validate_args.
- `parallel_state` / `microbatches` / `layer_spec`: megatron-core refuses it after the config, in
  initialize_model_parallel, the microbatch calculator or the GPT layer specs; reproduced here
  (megatron_core_oracle.later_failure).
- `forward`: the model's first forward fails; reproduced by one forward of a one-layer GPT with the job's
  heads and groups on CPU (megatron_core_oracle.forward_failure).
- `schedule`: megatron-core's interleaved pipeline schedule refuses it at the first step; reproduced by
  running that schedule on CPU ranks (megatron_core_oracle.schedule_failures).
- `masked`: why it is not reproduced.
"""

from __future__ import annotations

from typing import NamedTuple


class Case(NamedTuple):
    name: str
    rule: str
    how: str
    detail: str


_C, _F = "corpus/NVIDIA__Megatron-LM__", "fixture/"
_UNRECOGNIZED = r"^SystemExit\(2\): .*unrecognized arguments"
_BARE_ASSERT = r"^AssertionError: $"
_LAYERS_PP = r"Number of layers should be divisible by the pipeline-model-parallel size"
_WORLD = r"world size \(\d+\) is not divisible by total_model_size"
_TOO_FEW = r"The number of contiguous micro-batches in a virtual pipeline stage ?should range in \[PP=4 , M=\d\]"


def _v(name: str, rule: str, pattern: str) -> Case:
    return Case(name, rule, "validate_args", pattern)


MEGATRON_ACCEPTED_BUT_ERRS = [
    _v(_C + "gptoss_02_train", "MLM106", _LAYERS_PP),
    _v(_C + "pretrain_gpt_distributed_with_mp_2021", "MLM001", _UNRECOGNIZED),
    _v(_C + "train_bert_340m_distributed", "MLM101", _WORLD),
    Case(_C + "train_bert_340m_distributed", "MLM106", "masked",
         "validate_args stops at the world-size assertion (MLM101) before its layers/PP assertion"),
    _v(_C + "train_gpt3_175b_distributed", "MLM001", _UNRECOGNIZED),
    Case(_C + "train_gpt3_175b_distributed", "MLM101", "parallel_state", r"world_size \(\d+\) is not divisible by \d+"),
    Case(_C + "train_mixtral_8x7b_distributed", "MLM109", "parallel_state",
         r"is not divisible by expert_tensor_model_pipeline_parallel size"),
    _v(_C + "issues__818", "MLM121", _BARE_ASSERT),  # assert getattr(args, req_arg) is not None
    _v(_F + "MLM001/removed_on_main.sh", "MLM129", r"legacy model format only supports the 'torch' checkpoint"),
    _v(_F + "MLM001/typo.sh", "MLM001", _UNRECOGNIZED),
    _v(_F + "MLM002/missing.sh", "MLM002", r"argument --lr: expected one argument"),
    _v(_F + "MLM003/bad.sh", "MLM003", r"argument --normalization: invalid choice"),
    _v(_F + "MLM004/switch.sh", "MLM004", r"argument --bf16: ignored explicit argument"),
    _v(_F + "MLM005/stray.sh", "MLM005", _UNRECOGNIZED),
    _v(_F + "MLM007/removed.sh", "MLM007", r"--checkpoint-activations is no longer valid"),
    _v(_F + "MLM008/repeated.sh", "MLM121", _BARE_ASSERT),
    _v(_F + "MLM011/known_program.sh", "MLM001", _UNRECOGNIZED),
    _v(_F + "MLM101/world.sh", "MLM101", _WORLD),
    Case(_F + "MLM104/heads_groups.sh", "MLM104", "forward", r"RuntimeError: shape .* is invalid for input of size"),
    _v(_F + "MLM105/hidden.sh", "MLM105", _BARE_ASSERT),  # assert args.hidden_size % args.num_attention_heads == 0
    _v(_F + "MLM106/layers.sh", "MLM106", _LAYERS_PP),
    _v(_F + "MLM107/both.sh", "MLM107", r"No more than one of the following arguments can be set at the same time"),
    Case(_F + "MLM107/both.sh", "MLM203", "masked", "validate_args refuses it first (MLM107): no schedule runs"),
    Case(_F + "MLM107/clean.sh", "MLM203", "schedule", _TOO_FEW),
    _v(_F + "MLM107/per_stage.sh", "MLM107", r"number of layers per pipeline stage must be divisible"),
    _v(_F + "MLM107/pp1.sh", "MLM107", r"When interleaved schedule is used, pipeline-model-parallel size should"),
    _v(_F + "MLM109/experts.sh", "MLM109", r"Number of experts should be a multiple of expert model parallel_size"),
    Case(_F + "MLM109/mixtral.sh", "MLM109", "parallel_state",
         r"is not divisible by expert_tensor_model_pipeline_parallel size"),
    Case(_F + "MLM120/gbs.sh", "MLM120", "microbatches", r"global batch size \(100\) is not divisible"),
    Case(_F + "MLM114/short.sh", "MLM114", "layer_spec", r"Invalid length of moe_layer_pattern: 4, expected 6"),
    _v(_F + "MLM122/seq.sh", "MLM122", r"max_position_embeddings \(2048\) must be greater than or equal"),
    _v(_F + "MLM123/cp.sh", "MLM123", r"seq-length should be a multiple of 2 \* context-parallel-size"),
    _v(_F + "MLM124/distribute_tp1.sh", "MLM124", r"can distribute recomputed activations only across tensor"),
    _v(_F + "MLM124/selective_method.sh", "MLM124", r"recompute method is not yet supported for selective"),
    _v(_F + "MLM125/xent.sh", "MLM125", r"lm cross entropy in fp16 only support in fp16 mode"),
    _v(_F + "MLM126/no_distopt.sh", "MLM126", r"--overlap-param-gather only supported with distributed optimizer"),
    _v(_F + "MLM126/no_grad_reduce.sh", "MLM126", r"Must use --overlap-param-gather with --overlap-grad-reduce"),
    _v(_F + "MLM127/mixed.sh", "MLM127", r"expected iteration-based learning rate decay"),
    _v(_F + "MLM127/mixed_samples.sh", "MLM127", r"expected sample-based learning rate decay"),
    _v(_F + "MLM127/rampup_iters.sh", "MLM127", r"expected no batch-size rampup for iteration-based training"),
    _v(_F + "MLM127/rampup_iters_main.sh", "MLM127", r"expected no batch-size rampup for iteration-based training"),
    _v(_F + "MLM127/step_and_gbs.sh", "MLM001", _UNRECOGNIZED),
    _v(_F + "MLM128/lr.sh", "MLM128", _BARE_ASSERT),  # assert args.min_lr <= args.lr
    _v(_F + "MLM129/legacy.sh", "MLM129", r"legacy model format only supports the 'torch' checkpoint format"),
    Case(_F + "MLM203/cannot_fill.sh", "MLM203", "schedule", _TOO_FEW),
    Case(_F + "MLM203/remainder.sh", "MLM203", "schedule",
         r"The remainder of M \(the total micro-batches\) divided by N"),
]
