"""MLM101, MLM109-MLM111, MLM113: the parallel degrees: world divisibility, experts, sequence parallelism, CUDA env."""

from __future__ import annotations

from typing import TYPE_CHECKING

from guard.rules.registry import check, rule

if TYPE_CHECKING:  # annotations only: a DeepSpeed-only check never imports the Megatron context
    from guard.rules.megatron_context import MegatronCheck

WORLD = rule(
    "MLM101", "world-size-not-divisible", "error",
    "TP x PP x CP does not divide the number of GPUs the launcher starts.",
    what="With the world size from the launcher (`torchrun --nnodes x --nproc-per-node`, "
         "`deepspeed --num_nodes x --num_gpus`, srun tasks, `--world-size`), checks that "
         "tensor x pipeline x context parallel sizes divide it (x Ulysses size on Megatron-DeepSpeed).",
    why="`initialize_model_parallel` stops every rank with `RuntimeError: world_size (16) is not "
        "divisible by 12`. The example scripts of Megatron-LM itself ship this mistake "
        "(GPT-3 175B: TP8 x PP16 on one 8-GPU node).",
    example="torchrun --nproc-per-node 8 --nnodes 2 pretrain_gpt.py --tensor-model-parallel-size 4 "
            "--pipeline-model-parallel-size 3",
    use_instead="... --tensor-model-parallel-size 4 --pipeline-model-parallel-size 2",
    references=("megatron/core/parallel_state.py: initialize_model_parallel",
                "megatron/training/arguments.py: validate_args"),
)

MOE = rule(
    "MLM109", "expert-parallel-invalid", "error",
    "Expert parallelism that the world, the experts or the data-parallel group cannot hold.",
    what="Checks `--expert-model-parallel-size` against `--num-experts` (experts % EP), "
         "`world % (ETP x EP x PP) == 0` (ETP defaults to TP), and that MoE layers with biases "
         "(no `--disable-bias-linear`) keep ETP at 1.",
    why="validate_args: 'num_experts must be non None to use expert model parallelism', 'Number of "
        "experts should be a multiple of expert model parallel_size.'; initialize_model_parallel: "
        "`world_size (16) is not divisible by expert_tensor_model_pipeline_parallel size (64)` "
        "(Mixtral example: PP4 on one node leaves no room for EP8); TransformerConfig: 'Bias in Moe is "
        "only supported when ETP==1'.",
    example="--num-experts 8 --expert-model-parallel-size 8 --pipeline-model-parallel-size 4   # on 8 GPUs",
    use_instead="--num-experts 8 --expert-model-parallel-size 2 --pipeline-model-parallel-size 4",
)

SP_WITHOUT_TP = rule(
    "MLM110", "sequence-parallel-without-tp", "warning",
    "--sequence-parallel with tensor-parallel size 1 does nothing.",
    what="Reports `--sequence-parallel` when TP is 1.",
    why="validate_args turns it off ('Disabling sequence parallelism because tensor model "
        "parallelism is disabled'); megatron-core's ModelParallelConfig used directly raises "
        "`Cannot use sequence parallelism without tensor parallelism`. Memory estimates that count "
        "on it are wrong.",
    example="--tensor-model-parallel-size 1 --sequence-parallel",
    use_instead="--tensor-model-parallel-size 2 --sequence-parallel",
)

MAX_CONNECTIONS = rule(
    "MLM111", "cuda-device-max-connections", "error",
    "TP or CP > 1 needs CUDA_DEVICE_MAX_CONNECTIONS=1 exported by the launch script (FSDP needs it unset).",
    what="In a launch script, checks that `CUDA_DEVICE_MAX_CONNECTIONS=1` is exported (or set on the "
         "launch command) when TP > 1 or CP > 1 (Megatron-DeepSpeed: with --sequence-parallel), "
         "and that it is not 1 with `--use-torch-fsdp2`/`--use-megatron-fsdp`.",
    why="validate_args asserts 'Using tensor model parallelism or context parallelism require "
        "setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1' on GPUs older than "
        "Blackwell; the kernel ordering that overlaps TP communication depends on it.",
    example="torchrun ... --tensor-model-parallel-size 2",
    use_instead="export CUDA_DEVICE_MAX_CONNECTIONS=1\ntorchrun ... --tensor-model-parallel-size 2",
)

EP_TP_SP = rule(
    "MLM113", "expert-tp-without-sp", "warning",
    "Expert parallelism with tensor parallelism but without --sequence-parallel.",
    what="Reports EP > 1 and TP > 1 without `--sequence-parallel`.",
    why="ModelParallelConfig warns 'When using expert parallelism and tensor parallelism for "
        "training, sequence parallelism must be used'; the MoE token dispatcher expects "
        "sequence-sharded activations.",
    example="--tensor-model-parallel-size 2 --expert-model-parallel-size 4 --num-experts 8",
    use_instead="--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 4 --num-experts 8",
)


@check(WORLD, target="megatron")
def world_size(s: MegatronCheck) -> None:
    lay, cmd = s.job.layout, s.cmd
    if lay.world is None or lay.model_parallel is None:
        return
    factors = [("tp", lay.tp, "tensor_model_parallel_size"), ("pp", lay.pp, "pipeline_model_parallel_size")]
    if cmd.flavour == "megatron-deepspeed":
        factors.append(("sp", lay.ulysses, "ds_sequence_parallel_size"))
    else:
        factors.append(("cp", lay.cp, "context_parallel_size"))
    if lay.world % lay.model_parallel == 0:
        return
    shown = " * ".join(f"{name}({value})" for name, value, _ in factors)
    biggest = max(factors, key=lambda f: f[1])
    s.report(WORLD, biggest[2], f"{shown} = {lay.model_parallel} does not divide world size {lay.world} "
             f"({s.job.origin('layout.world').label})", at_value=cmd.given(biggest[2]),
             help=f"choose sizes whose product divides {lay.world}, or change the launcher",
             related=[cmd.related(d, f"{n}={v}") for n, v, d in factors if cmd.given(d) and d != biggest[2]])


@check(MOE, EP_TP_SP, target="megatron")
def experts(s: MegatronCheck) -> None:
    cmd, job, lay = s.cmd, s.job, s.job.layout
    if "expert_model_parallel_size" not in cmd.table.by_dest or lay.ep is None:
        return
    ep = lay.ep
    experts = job.arch.num_experts if job.arch else None
    if ep > 1 and not experts and job.arch is not None:
        s.report(MOE, "expert_model_parallel_size", "num_experts must be non None to use expert model "
                 "parallelism", help="add --num-experts")
        return
    if experts and ep > 1 and experts % ep:
        s.report(MOE, "expert_model_parallel_size", f"num_experts ({experts}) is not a multiple of "
                 f"expert_model_parallel_size ({ep})", at_value=True)
        return
    etp = lay.expert_tp
    if experts and etp and etp > 1 and job.arch.linear_bias:
        given = cmd.given("expert_tensor_parallel_size")
        s.report(MOE, "expert_tensor_parallel_size" if given else "num_experts", f"Bias in MoE is only supported "
                 f"when ETP==1: expert_tensor_parallel_size is {etp}{'' if given else ' (it defaults to TP)'} and "
                 "linear layers have biases", help="add --disable-bias-linear, or --expert-tensor-parallel-size 1")
    if lay.world and etp and lay.pp and ep > 1 and lay.world % (etp * ep * lay.pp):
        size = etp * ep * lay.pp
        s.report(MOE, "expert_model_parallel_size",
                 f"etp({etp}) * ep({ep}) * pp({lay.pp}) = {size} does not divide world size "
                 f"{lay.world} ({job.origin('layout.world').label})", at_value=True,
                 help="experts are carved out of the data-parallel ranks: lower EP or PP, or add GPUs")
    if ep > 1 and lay.tp and lay.tp > 1 and not lay.sequence_parallel and cmd.known("sequence_parallel"):
        s.report(EP_TP_SP, "expert_model_parallel_size", "expert parallelism with tensor parallelism "
                 "needs --sequence-parallel", help="add --sequence-parallel")


@check(SP_WITHOUT_TP, target="megatron")
def sequence_parallel(s: MegatronCheck) -> None:
    if s.cmd.given("sequence_parallel") and s.job.layout.tp == 1:
        s.report(SP_WITHOUT_TP, "sequence_parallel", "--sequence-parallel with tensor_model_parallel_size "
                 "1: Megatron disables sequence parallelism", help="remove it, or use TP > 1")


@check(MAX_CONNECTIONS, target="megatron")
def max_connections(s: MegatronCheck) -> None:
    cmd, lay = s.cmd, s.job.layout
    if cmd.env is None:
        return  # a bare command line: the environment is not known
    var = cmd.env_value("CUDA_DEVICE_MAX_CONNECTIONS")
    if var is not None and var.value is None:
        return  # assigned from something unresolved
    fsdp = cmd.v("use_torch_fsdp2") is True or s.job.fsdp_sharding is not None
    if fsdp:
        if var is not None and var.value == "1":
            s.report_at(MAX_CONNECTIONS, var.span, "CUDA_DEVICE_MAX_CONNECTIONS",
                        "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset, got 1", path=var.path)
        return
    if "overlapped_distributed_optimizer" in cmd.table.by_dest and cmd.v("overlapped_distributed_optimizer") is True:
        return  # Megatron-LLaMA's validate_args skips the check with its overlapped optimizer (arguments.py:357)
    if cmd.flavour == "megatron-deepspeed":
        needs = lay.sequence_parallel
        reason = "sequence parallelism"
    else:
        needs = (lay.tp or 1) > 1 or (lay.cp or 1) > 1
        reason = "tensor or context parallelism"
    if needs and (var is None or var.value != "1"):
        got = "it is not exported" if var is None else f"it is {var.value!r}"
        dest = "tensor_model_parallel_size" if cmd.given("tensor_model_parallel_size") else "context_parallel_size"
        s.report(MAX_CONNECTIONS, dest, f"{reason} requires CUDA_DEVICE_MAX_CONNECTIONS=1 in the "
                 f"environment; {got}", help="add `export CUDA_DEVICE_MAX_CONNECTIONS=1` before the launch "
                 "(Blackwell GPUs and newer are exempt)")
