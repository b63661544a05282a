"""Training settings of a Megatron command: precision, optimizer, recompute, kernels, DeepSpeed, a distillation
teacher, what is unmodelled."""

from __future__ import annotations

from guard.inputs import find_near
from guard.job import cuda_graphs, distillation
from guard.job.accounting import account_flags, account_keys
from guard.job.flag_values import FlagValues, enum_name
from guard.job.megatron_program import read_program
from guard.job.origin import Origin
from guard.sources.document import SourceError
from guard.sources.loader import load_document


def read_training(fv: FlagValues) -> None:
    read_program(fv)
    _precision(fv)
    _recompute(fv)
    _kernels(fv)
    _step(fv)
    if fv.job.framework == "megatron-deepspeed":
        _deepspeed(fv)
    _teacher(fv)
    _unmodelled(fv)


def _teacher(fv: FlagValues) -> None:
    """--export-kd-teacher-load: the teacher the student carries (guard/job/distillation.py), from the YAML Megatron
    reads it from when that file is here, else priced as the student's own architecture and said so."""
    job = fv.job
    load = fv.value("export_kd_teacher_load")
    if not isinstance(load, str) or not load or job.arch is None:
        return
    path = distillation.teacher_config_path(load, fv.value("export_kd_teacher_model_config"))
    found = find_near(path, fv.cmd.path) if path else None
    config = None
    if found:
        try:
            config = load_document(found).data
        except SourceError as err:
            job.notes.append(f"distillation: the teacher's config {found} cannot be read ({err})")
    job.teacher = distillation.teacher_architecture(job.arch, config if isinstance(config, dict) else None)
    job.origins["teacher"] = fv.origin("export_kd_teacher_load")
    source = f"from {found}" if config else "its model_config.yaml is not here: priced as the student's architecture"
    job.notes.append(f"distillation: the teacher's weights ({source}) in the compute dtype on every rank, and its "
                     "logits kept for the KD loss; the KD loss's own working set (modelopt's LogitsKLLoss, version "
                     "dependent) is not priced")


def _precision(fv: FlagValues) -> None:
    job = fv.job
    if fv.on("bf16", field="params_dtype"):
        job.params_dtype, job.grads_dtype = "bf16", "fp32"  # validate_args forces fp32 accumulation for bf16
    elif fv.on("fp16", field="params_dtype"):
        job.params_dtype = "fp16"
        job.grads_dtype = "fp32" if fv.on("accumulate_allreduce_grads_in_fp32") else "fp16"
    else:
        job.params_dtype, job.grads_dtype = "fp32", "fp32"
        job.origins["params_dtype"] = fv.origin("bf16")
    job.distributed_optimizer = fv.on("use_distributed_optimizer", field="distributed_optimizer")
    if fv.on("use_megatron_fsdp"):
        job.fsdp_sharding = str(fv.value("data_parallel_sharding_strategy", field="fsdp_sharding") or "no_shard")
        job.fsdp_double_buffer = fv.on("fsdp_double_buffer")
        job.fsdp_comm_unit = fv.int("suggested_communication_unit_size")
    if job.distributed_optimizer:
        job.optimizer_instances = fv.int("num_distributed_optimizer_instances", field="optimizer_instances") or 1
    chosen = str(fv.value("optimizer", field="optimizer") or "adam")
    job.optimizer = {"sgd": "sgd", "muon": "muon", "dist_muon": "muon"}.get(chosen, "adam")
    if chosen == "dist_muon":  # arguments.py: dist_muon is muon with the (layer-wise) distributed optimizer
        job.distributed_optimizer = True
    job.sgd_momentum = float(fv.value("sgd_momentum") or 0) > 0
    if fv.on("use_precision_aware_optimizer"):
        job.main_params_dtype = str(fv.value("main_params_dtype") or "fp32")
        job.exp_avg_dtype = str(fv.value("exp_avg_dtype") or "fp32")
        job.exp_avg_sq_dtype = str(fv.value("exp_avg_sq_dtype") or "fp32")
        if fv.value("main_grads_dtype") == "bf16":
            job.grads_dtype = "bf16"
    if fv.on("grad_reduce_in_bf16"):  # DDP's gradient buffer (and its reduce) in bf16
        job.grads_dtype = "bf16"
        job.origins["grads_dtype"] = fv.origin("grad_reduce_in_bf16")
    job.overlap_param_gather = fv.on("overlap_param_gather")
    job.overlap_grad_reduce = fv.on("overlap_grad_reduce")
    if str(fv.value("optimizer")) not in ("adam", "sgd", "adamw", "muon", "dist_muon"):
        job.add_unmodelled(f"optimizer {fv.value('optimizer')}", "--optimizer", fv.origin("optimizer"))


def _recompute(fv: FlagValues) -> None:
    job, cmd = fv.job, fv.cmd
    granularity = fv.value("recompute_granularity", field="recompute")
    if granularity is None and fv.on("recompute_activations"):  # validate_args: the old spelling of selective
        granularity = "selective"
        job.origins["recompute"] = fv.origin("recompute_activations")
    if cmd.flavour == "megatron-deepspeed" and (fv.on("checkpoint_activations") or
                                                fv.on("deepspeed_activation_checkpointing")):
        granularity = "full"
        job.origins["recompute"] = fv.origin("checkpoint_activations" if cmd.given("checkpoint_activations")
                                             else "deepspeed_activation_checkpointing")
        job.recompute_num_layers = fv.int("checkpoint_num_layers") or 1
    if granularity in ("full", "selective"):
        job.recompute = granularity
    if granularity == "full":
        job.recompute_method = str(fv.value("recompute_method") or "uniform")
        job.recompute_num_layers = fv.int("recompute_num_layers") or job.recompute_num_layers
    modules = fv.value("recompute_modules")
    if modules:
        job.recompute_modules = tuple(modules if isinstance(modules, list) else str(modules).split())
        if "mla_up_proj" in job.recompute_modules:
            job.add_unmodelled("recompute of MLA up-projections", "--recompute-modules",
                               fv.origin("recompute_modules"))
    job.distribute_saved_activations = fv.on("distribute_saved_activations")
    if fv.on("fine_grained_activation_offloading"):
        modules = fv.value("offload_modules", field="offload_modules") or []
        job.offload_modules = tuple(modules if isinstance(modules, list) else str(modules).split())
    if fv.on("overlap_moe_expert_parallel_comm"):
        job.add_unmodelled("the extra warm-up microbatch of --overlap-moe-expert-parallel-comm",
                           "--overlap-moe-expert-parallel-comm", fv.origin("overlap_moe_expert_parallel_comm"))


def _kernels(fv: FlagValues) -> None:
    """Attention without flash/fused kernels keeps the s^2 scores; the fused loss keeps 16-bit logits."""
    job, cmd = fv.job, fv.cmd
    impl = fv.value("transformer_impl")
    backend = job.step.attention_backend = enum_name(fv.value("attention_backend"), "auto")
    flash = any(fv.value(d) is True for d in ("use_flash_attn", "use_flash_attn_v1", "use_flash_attn_v2",
                                              "use_flash_attn_triton", "use_flash_attn_builder"))
    if backend in ("unfused", "local") or (impl == "local" and not flash) or \
            (cmd.flavour == "megatron-deepspeed" and not flash):
        job.attention = "unfused"
    # --cross-entropy-loss-fusion keeps 16-bit logits only with Transformer Engine's kernel (its triton
    # cross_entropy_forward writes the gradient into the input and saves that); the default native fusion
    # (fusions/fused_cross_entropy.py) takes `.float()` and saves the fp32 softmax as the unfused loss does, only
    # its gradient leaves in bf16 (tests/test_fidelity_loss.py measures both on CPU)
    job.fused_cross_entropy = fv.on("cross_entropy_loss_fusion") and \
        enum_name(fv.value("cross_entropy_fusion_impl"), "native") == "te"
    job.mtp_layers = fv.int("mtp_num_layers", field="mtp_layers") or 0
    if fv.on("defer_embedding_wgrad_compute"):  # layers.py: every microbatch unless --wgrad-deferral-limit caps it
        job.wgrad_deferral_limit = fv.int("wgrad_deferral_limit") or 0
        job.origins["deferred_wgrad"] = fv.origin("defer_embedding_wgrad_compute")
    # which GEMMs run where: Transformer Engine's linears keep their own cuBLAS workspace (workspaces.py)
    job.linear_impl = "transformer_engine" if impl in ("transformer_engine", "inference_optimized") else "megatron"
    # megatron's own attention (fusions/fused_softmax.py FusedScaleMaskSoftmax): without the fused kernel the
    # torch path upcasts the scores and autograd keeps the fp32 softmax (query-key scaling forces fp32)
    fp32_softmax = fv.on("attention_softmax_in_fp32") or fv.on("apply_query_key_layer_scaling")
    # FusedScaleMaskSoftmax.is_kernel_available: the fused kernel only for 16 < keys <= 4096, else the torch path
    torch_softmax = job.linear_impl == "megatron" and job.attention == "unfused" and \
        (fv.value("masked_softmax_fusion") is False or not 16 < (job.seq_length or 0) <= 4096)
    job.step.torch_softmax = torch_softmax
    if torch_softmax and fp32_softmax and job.params_dtype in ("bf16", "fp16"):
        job.softmax_bytes = 4
    job.moe_dispatcher = str(fv.value("moe_token_dispatcher_type") or "allgather")
    job.moe_grouped_gemm = fv.on("moe_grouped_gemm")
    job.torch_fsdp2 = fv.on("use_torch_fsdp2")
    capacity = fv.value("moe_expert_capacity_factor")
    if isinstance(capacity, (int, float)) and not isinstance(capacity, bool) and capacity > 0:
        job.moe_capacity_factor = float(capacity)
        job.moe_pad_to_capacity = fv.on("moe_pad_expert_input_to_capacity")
    # experts.py / mlp.py bias_act_func: only gated SwiGLU/quick-GeGLU fuse the probability weighting
    gated = bool(job.arch and job.arch.gated_mlp)
    fusion = fv.value("bias_swiglu_fusion" if gated else "bias_gelu_fusion")
    job.moe_weighted_act_fused = gated and fusion is not False and not fv.on("use_te_activation_func")
    workspace = cmd.env_value("CUBLAS_WORKSPACE_CONFIG")
    if workspace is not None and workspace.value:
        job.blas_workspace_config = workspace.value
        job.origins["blas_workspace_config"] = Origin("launcher", "CUBLAS_WORKSPACE_CONFIG", workspace.path,
                                                      workspace.span.line, workspace.span.col)


def _step(fv: FlagValues) -> None:
    """What the planner's clock reads of the command (guard/job/step_settings.py); the memory model does not.
    The attention backend is read once, with the kernels (_kernels)."""
    step = fv.job.step
    fp8 = fv.value("fp8")
    step.fp8 = str(fp8) if fp8 else None
    step.fp8_recipe = enum_name(fv.value("fp8_recipe"), "delayed")
    step.tp_comm_overlap = fv.on("tp_comm_overlap") and (fv.job.layout.tp or 1) > 1
    modules = next((fv.value(d) for d in ("cuda_graph_modules", "cuda_graph_scope", "cuda_graph_scope_deprecated")
                    if fv.cmd.given(d)), None)
    fv.job.cuda_graphs = cuda_graphs.read(fv.value("cuda_graph_impl"), fv.on("enable_cuda_graph"),
                                          fv.on("external_cuda_graph"), modules, fv.value("cuda_graph_warmup_steps"))
    step.cuda_graphs = fv.job.cuda_graphs is not None
    step.log_params_norm = fv.on("log_params_norm")
    step.log_num_zeros_in_grad = fv.on("log_num_zeros_in_grad")
    clip = fv.value("clip_grad")
    step.clip_grad = float(clip) if isinstance(clip, (int, float)) else 1.0


def _deepspeed(fv: FlagValues) -> None:
    from guard.job.from_deepspeed import apply_config

    job, cmd = fv.job, fv.cmd
    job.ds_pipeline = (job.layout.pp or 1) > 1 and not fv.on("no_pipeline_parallel")
    stage = fv.int("zero_stage")
    source = cmd.deepspeed_config
    config = source.data if source else {}
    flag_precision = job.params_dtype
    apply_config(job, config, source.label if source else cmd.path, locate=source.locate if source else None)
    if source:
        account_keys(job, config, source.label, source.locate)
        job.notes.extend(source.notes)
    if not source or not _precision_in(config):
        # no config, or one that says nothing of precision: Megatron-DeepSpeed's own flags decide
        job.params_dtype = flag_precision
        job.grads_dtype = flag_precision
        if source is None and cmd.given("deepspeed_config"):
            why = cmd.deepspeed_config_problem or f"the DeepSpeed config {cmd.v('deepspeed_config')} was not found"
            job.notes.append(f"{why}: precision from the command's flags, ZeRO from --zero-stage")
    zero = config.get("zero_optimization")
    if stage is not None and not (isinstance(zero, bool) or (isinstance(zero, dict) and "stage" in zero)):
        # DeepSpeed reads the stage from its config; --zero-stage stands in only where the config says none
        job.zero_stage = stage
        job.origins["zero_stage"] = fv.origin("zero_stage")
    job.distributed_optimizer = False
    if job.arch is not None and job.arch.is_moe and job.zero_stage >= 1 and (job.layout.ep or 1) > 1:
        # DeepSpeed puts expert parameters in their own groups, partitioned over the expert data-parallel
        # group (DP / EP: runtime/zero/stage_1_and_2.py real_dp_process_group); guard partitions them over DP
        job.add_unmodelled("ZeRO partitions of the expert parameters over DP / EP (priced over DP: too low)",
                           cmd.option("moe_expert_parallel_size"), fv.origin("moe_expert_parallel_size"))


def _precision_in(config: dict) -> bool:
    return any(isinstance(config.get(k), dict) and "enabled" in config[k] for k in ("fp16", "bf16", "bfloat16"))


def _unmodelled(fv: FlagValues) -> None:
    job, cmd = fv.job, fv.cmd
    if (job.layout.ulysses or 1) > 1:
        job.add_unmodelled("DeepSpeed-Ulysses all-to-all buffers (activations priced at s / SP)",
                           cmd.option("ds_sequence_parallel_size"), fv.origin("ds_sequence_parallel_size"))
    account_flags(fv)
