"""What the launched program builds beyond a GPT decoder: model type, extra encoders, frozen parts."""

from __future__ import annotations

import os

from guard.job.flag_values import FlagValues

# Programs whose model is the GPT decoder guard prices (Megatron-LM, megatron-core, Megatron-DeepSpeed).
GPT_PROGRAMS = {"pretrain_gpt.py", "pretrain_gpt_core.py", "finetune_llama.py", "train_rl.py"}
# Programs that build something else: the feature named in the unmodelled list.
OTHER_PROGRAMS = {
    "pretrain_bert.py": "BERT's own modules (pooler, binary head, LM-head transform; layers priced as GPT's)",
    "pretrain_t5.py": "the T5 encoder-decoder (priced as one GPT decoder stack)",
    "pretrain_ict.py": "the ICT retriever's two BERT encoders (priced as one GPT decoder)",
    "pretrain_retro.py": "RETRO's retrieval encoder and chunked cross-attention",
    "pretrain_mamba.py": "Mamba / hybrid SSM layers (priced as transformer layers)",
    "pretrain_hybrid.py": "hybrid Mamba-Transformer SSM layers (priced as transformer layers)",
    "pretrain_vlm.py": "the vision encoder and projection of the vision-language model",
    "train.py": "the vision encoder and projection of the multimodal model",
    "pretrain_vision_classify.py": "the vision transformer classifier (priced as a GPT decoder)",
    "pretrain_vision_dino.py": "DINO's student and teacher vision transformers (priced as one GPT decoder)",
    "pretrain_vision_inpaint.py": "the vision inpainting transformer (priced as a GPT decoder)",
}
# Multimodal freezing flags (examples/multimodal/train.py, pretrain_vlm.py): the part that gets no
# gradients and no optimizer state (megatron/training: requires_grad False, skipped by DDP and the optimizer).
FREEZE_FLAGS = {"freeze_LM": "language model", "freeze_ViT": "vision encoder", "freeze_sound_model": "sound model",
                "freeze_vision_projection": "vision projection", "freeze_sound_projection": "sound projection"}


def read_program(fv: FlagValues) -> None:
    job, cmd = fv.job, fv.cmd
    program = os.path.basename(cmd.program) if cmd.program else ""
    if not program:
        job.notes.append("no program in the command: priced as pretrain_gpt.py's GPT decoder")
    elif program in OTHER_PROGRAMS:
        job.add_unmodelled(OTHER_PROGRAMS[program], program, job.origins["command"])
    elif program not in GPT_PROGRAMS:
        job.notes.append(f"{program} is not a program guard knows: priced as a GPT decoder")
    frozen = tuple(part for dest, part in FREEZE_FLAGS.items()
                   if dest in cmd.table.by_dest and cmd.v(dest) is True)
    if frozen:
        job.frozen = frozen
        job.origins["frozen"] = fv.origin(next(d for d, p in FREEZE_FLAGS.items() if p == frozen[0]))
