"""An HF Trainer program as users write one: HfArgumentParser over its own model arguments and TrainingArguments,
the model from a local folder, random tokens for data; prints the real peak of torch's allocator on each rank."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments


@dataclass
class ModelArguments:
    model_name_or_path: str
    block_size: int = 1024  # run_clm.py's name for the sequence length


class RandomTokens(torch.utils.data.Dataset):
    """Full-length samples of random token ids (no padding: the memory of a packed batch)."""

    def __init__(self, count: int, length: int, vocab: int):
        self.count, self.length, self.vocab = count, length, vocab

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict:
        ids = torch.randint(self.vocab, (self.length,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids.clone()}


def main() -> None:
    model_args, args = HfArgumentParser((ModelArguments, TrainingArguments)).parse_args_into_dataclasses()
    model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path)
    data = RandomTokens(args.max_steps * args.per_device_train_batch_size * args.gradient_accumulation_steps * 8,
                        model_args.block_size, model.config.vocab_size)
    Trainer(model=model, args=args, train_dataset=data).train()
    if torch.cuda.is_available():
        print("PEAK " + json.dumps({"rank": int(os.environ.get("RANK", 0)),
                                    "max_allocated": torch.cuda.max_memory_allocated(),
                                    "max_reserved": torch.cuda.max_memory_reserved(),
                                    "dtype": str(next(model.parameters()).dtype)}), flush=True)


if __name__ == "__main__":
    main()
