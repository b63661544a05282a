"""Training configs of the HF fine-tuning frameworks (LLaMA-Factory, axolotl, TRL / the HF Trainer)."""
