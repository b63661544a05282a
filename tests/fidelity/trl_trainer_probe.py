"""Run TRL's DPO and GRPO trainers one step on CPU with a transformers Llama built from a config (random weights, a
word-level tokenizer built in memory: nothing downloaded), and transformers' generate with its KV cache; record
what guard prices: the rows through the policy's forward, the tokens its fused LM head scores, the completions one
generate call makes, and the cache's bytes.

    python trl_trainer_probe.py SPEC.json OUT.json

SPEC: {"model": LlamaConfig kwargs, "dpo": {...}, "grpo": {...}, "generate": {...}}. One process, no DeepSpeed:
the trainers' batching does not depend on it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

import torch

WORDS = [f"w{i}" for i in range(200)]
ORIGINAL_HEAD: dict = {}  # TRL's own ChunkedLogProbFunction, wrapped anew for each trainer


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def _text(n: int, seed: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(n))


def _model(config: dict, folder: str | None = None):
    """The tiny Llama; saved to and loaded from `folder` when a trainer loads its reference from the policy's path."""
    import transformers

    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config))
    if folder is None:
        return model
    model.save_pretrained(folder)
    return transformers.LlamaForCausalLM.from_pretrained(folder)


class Recorder:
    """The rows of every forward of the backbone and the tokens of every fused-head call."""

    def __init__(self):
        self.rows, self.scored, self.generated = [], [], []

    def watch(self, model) -> None:
        model.model.register_forward_pre_hook(
            lambda _m, args, kwargs: self.rows.append(list((kwargs.get("input_ids") if kwargs.get("input_ids")
                                                            is not None else args[0]).shape)), with_kwargs=True)
        generate = model.generate

        def counted(*args, **kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            self.generated.append(int(ids.shape[0]))
            return generate(*args, **kwargs)

        model.generate = counted

    def watch_head(self) -> None:
        """Count the tokens each fused-head call scores, on the path CUDA takes: `compact` (only the labelled
        positions, `hidden_states[mask]`) is chosen by utils._use_triton; the tiles themselves stay torch's."""
        import trl.trainer.utils as utils

        original = ORIGINAL_HEAD.setdefault("head", utils._ChunkedLogProbFunction)
        utils._use_triton = lambda device: True

        class Counting(original):
            @staticmethod
            def forward(ctx, hidden, *rest):
                self_.scored.append(int(hidden.shape[0]))
                return original.forward(ctx, hidden, *rest)

        self_ = self
        utils._ChunkedLogProbFunction = Counting


def run_dpo(spec: dict, config: dict, work: str) -> dict:
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    rec = Recorder()
    rec.watch_head()
    model = _model(config, os.path.join(work, "policy"))
    rec.watch(model)
    n = spec["micro_batch"] * 2
    data = Dataset.from_dict({"prompt": [_text(spec["prompt"], i) for i in range(n)],
                              "chosen": [_text(spec["completion"], i + 1) for i in range(n)],
                              "rejected": [_text(spec["completion"], i + 2) for i in range(n)]})
    args = DPOConfig(output_dir=work, per_device_train_batch_size=spec["micro_batch"], max_steps=1, report_to=[],
                     use_cpu=True, bf16=False, max_length=spec["max_length"], logging_steps=1, save_strategy="no")
    trainer = DPOTrainer(model=model, args=args, train_dataset=data, processing_class=_tokenizer())
    rec.rows.clear()
    rec.scored.clear()
    trainer.train()
    return {"rows": rec.rows, "scored": rec.scored, "reference_kept": trainer.ref_model is not None}


def run_grpo(spec: dict, config: dict, work: str) -> dict:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    rec = Recorder()
    rec.watch_head()
    model = _model(config)
    rec.watch(model)
    data = Dataset.from_dict({"prompt": [_text(spec["prompt"], i) for i in range(16)]})
    args = GRPOConfig(output_dir=work, per_device_train_batch_size=spec["micro_batch"],
                      num_generations=spec["num_generations"], steps_per_generation=spec["steps_per_generation"],
                      max_completion_length=spec["completion"], max_steps=1, report_to=[], use_cpu=True, bf16=False,
                      logging_steps=1, save_strategy="no", temperature=1.0)
    trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **kw: [0.0] * len(completions), args=args,
                          train_dataset=data, processing_class=_tokenizer())
    trainer.train()
    return {"generated": rec.generated, "scored": rec.scored, "rows": rec.rows}


def run_generate(spec: dict, config: dict) -> dict:
    """greedy generate in bf16; the cache after it holds K and V for every position but the last generated one."""
    model = _model(config).to(torch.bfloat16).eval()
    ids = torch.randint(3, config["vocab_size"], (spec["batch"], spec["prompt"]))
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=spec["new_tokens"],
                             min_new_tokens=spec["new_tokens"], do_sample=False, return_dict_in_generate=True,
                             use_cache=True, pad_token_id=0)
    cache = out.past_key_values
    total, length = 0, None
    for layer in cache.layers:
        for t in (layer.keys, layer.values):
            total += t.numel() * t.element_size()
            length = t.shape[-2]
    return {"cache_bytes": total, "cached_positions": length, "sequences": list(out.sequences.shape)}


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    with tempfile.TemporaryDirectory() as work:
        os.environ.setdefault("WANDB_DISABLED", "true")
        result = {"dpo": run_dpo(spec["dpo"], spec["model"], work),
                  "grpo": run_grpo(spec["grpo"], spec["model"], work),
                  "generate": run_generate(spec["generate"], spec["model"])}
    with open(sys.argv[2], "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
