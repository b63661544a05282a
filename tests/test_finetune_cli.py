"""Fine-tuning jobs started from a command line (llamafactory-cli, axolotl, trl, an HF Trainer program under a
launcher): the flags merged over the config file as each framework merges them, the world from the launcher, and
every finding at the word that wrote the value. Expected values follow the frameworks' documented semantics."""

from __future__ import annotations

import json

from conftest import run_guard

DS_AUTO = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
           "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"}, "gradient_clipping": 1.0,
           "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True}}
LF_YAML = ("model_name_or_path: meta-llama/Llama-2-7b-hf\nstage: sft\nfinetuning_type: lora\ncutoff_len: 2048\n"
           "per_device_train_batch_size: 1\ngradient_accumulation_steps: 8\nbf16: true\ndeepspeed: ds.json\n")
AX_YAML = ("base_model: meta-llama/Llama-2-7b-hf\nadapter: lora\nsequence_len: 2048\nmicro_batch_size: 1\n"
           "gradient_accumulation_steps: 4\nbf16: true\ndeepspeed: ds.json\ndatasets: []\n")


def _setup(tmp_path, script: str, files: dict[str, str], ds: dict | None = None, name: str = "run.sh") -> str:
    (tmp_path / "ds.json").write_text(json.dumps(DS_AUTO if ds is None else ds))
    for file, text in files.items():
        (tmp_path / file).write_text(text)
    path = tmp_path / name
    path.write_text(script)
    return str(path)


def _layout(path: str, *extra: str) -> dict:
    code, out, err = run_guard("estimate", path, "--format", "json", *extra)
    assert code == 0, out + err
    return json.loads(out)


def _check(path: str, *extra: str) -> tuple[int, list[dict]]:
    code, out, _ = run_guard("check", "--isolated", "--format", "json", "--select", "FT,GRD", *extra, path)
    return code, json.loads(out)


def _col(text: str, word: str) -> int:
    return text.index(word) + 1


# -- LLaMA-Factory -----------------------------------------------------------------------------------------------
def test_llamafactory_cli_overrides_merge_over_the_yaml_and_torchrun_world_comes_from_the_env(tmp_path):
    script = "FORCE_TORCHRUN=1 NNODES=2 NPROC_PER_NODE=4 llamafactory-cli train sft.yaml " \
             "per_device_train_batch_size=2 cutoff_len=4096\n"
    data = _layout(_setup(tmp_path, script, {"sft.yaml": LF_YAML}))
    layout = data["layout"]
    # launcher.py: torchrun --nnodes 2 --nproc_per_node 4; OmegaConf dotlist values win over the file's
    assert (layout["world_size"], layout["micro_batch_size"], layout["num_microbatches"], layout["seq_length"]) == \
        (8, 2, 8, 4096)


def test_a_finding_about_an_override_points_at_the_override_in_the_script(tmp_path):
    script = "llamafactory-cli train sft.yaml cutoff_len=8192\n"
    path = _setup(tmp_path, script, {"sft.yaml": LF_YAML})
    code, found = _check(path)
    assert code == 1 and [d["code"] for d in found] == ["FT004"]  # Llama-2 has 4096 positions
    assert (found[0]["path"], found[0]["line"], found[0]["col"], found[0]["pointer"]) == \
        (path, 1, _col(script, "8192"), "cutoff_len")


def test_a_mismatch_from_an_override_is_reported_at_it_and_one_from_the_yaml_at_the_key(tmp_path):
    ds = dict(DS_AUTO, gradient_accumulation_steps=8, train_micro_batch_size_per_gpu=1)
    script = "llamafactory-cli train sft.yaml gradient_accumulation_steps=4 per_device_train_batch_size=1\n"
    path = _setup(tmp_path, script, {"sft.yaml": LF_YAML.replace("per_device_train_batch_size: 1",
                                                                 "per_device_train_batch_size: 2")}, ds)
    code, found = _check(path)
    where = sorted((d["path"], d["line"], d["col"]) for d in found if d["code"] == "FT001")
    # GAS 8 (ds) vs 4 (override); the override's micro batch 1 agrees with ds, the YAML's 2 does not count
    assert code == 1 and where == [(path, 1, _col(script, "4 per"))]


def test_cuda_visible_devices_is_the_device_count_and_an_exported_nproc_wins(tmp_path):
    one = _setup(tmp_path, "CUDA_VISIBLE_DEVICES=0,1,2,3 llamafactory-cli train sft.yaml\n", {"sft.yaml": LF_YAML})
    assert _layout(one)["layout"]["world_size"] == 4
    two = _setup(tmp_path, "export NPROC_PER_NODE=2\nexport FORCE_TORCHRUN=1\nllamafactory-cli train sft.yaml\n",
                 {}, name="two.sh")
    assert _layout(two)["layout"]["world_size"] == 2
    single = _setup(tmp_path, "CUDA_VISIBLE_DEVICES=0 llamafactory-cli train sft.yaml\n", {}, name="one.sh")
    assert _layout(single)["layout"]["world_size"] == 1


def test_without_the_env_the_world_is_world_size_else_one_process_said_so(tmp_path):
    path = _setup(tmp_path, "llamafactory-cli train sft.json learning_rate=1e-4\n",
                  {"sft.json": json.dumps({"model_name_or_path": "meta-llama/Llama-2-7b-hf", "cutoff_len": 1024,
                                           "finetuning_type": "lora", "deepspeed": "ds.json", "bf16": True})})
    assert _layout(path, "--world-size", "4")["layout"]["world_size"] == 4
    said = _layout(path)["origins"]["layout.world"]
    assert "NPROC_PER_NODE is not set" in said and "one process: give --world-size N" in said


def test_llamafactory_without_a_config_file_parses_its_flags_as_hfargumentparser(tmp_path):
    script = ("llamafactory-cli train --model_name_or_path meta-llama/Llama-2-7b-hf --finetuning_type lora "
              "--cutoff_len 1024 --per-device-train-batch-size 3 --bf16 --deepspeed ds.json\n")
    layout = _layout(_setup(tmp_path, script, {}), "--world-size", "2")["layout"]
    assert (layout["micro_batch_size"], layout["seq_length"], layout["world_size"]) == (3, 1024, 2)


# -- axolotl -----------------------------------------------------------------------------------------------------
def test_axolotl_train_click_options_and_launcher_args_after_the_double_dash(tmp_path):
    script = "axolotl train ax.yml --micro-batch-size 2 --load-in-4bit --adapter qlora -- --num_processes 4\n"
    data = _layout(_setup(tmp_path, script, {"ax.yml": AX_YAML}))
    layout, adapter = data["layout"], data["model"]["adapter"]
    assert (layout["world_size"], layout["micro_batch_size"], layout["num_microbatches"]) == (4, 2, 4)
    assert (adapter["method"], adapter["quant_bits"]) == ("qlora", 4)


def test_accelerate_launch_of_the_axolotl_module_takes_fire_style_overrides(tmp_path):
    script = "accelerate launch --num_processes 2 -m axolotl.cli.train ax.yml --sequence_len=1024 " \
             "--micro_batch_size 3\n"
    layout = _layout(_setup(tmp_path, script, {"ax.yml": AX_YAML}))["layout"]
    assert (layout["world_size"], layout["micro_batch_size"], layout["seq_length"]) == (2, 3, 1024)


# -- TRL / HF Trainer programs ------------------------------------------------------------------------------------
TRL_ARGS = ("--model_name_or_path meta-llama/Llama-2-7b-hf --per_device_train_batch_size 4 "
            "--gradient_accumulation_steps 2 --bf16 --deepspeed ds.json --max_length 2048 --use_peft --lora_r 16 "
            "--output_dir out")


def test_accelerate_config_file_gives_the_world_and_flags_give_the_job(tmp_path):
    acc = "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_machines: 1\nnum_processes: 4\n"
    path = _setup(tmp_path, f"accelerate launch --config_file acc.yaml train.py {TRL_ARGS}\n", {"acc.yaml": acc})
    data = _layout(path)
    layout, model = data["layout"], data["model"]
    assert (layout["world_size"], layout["micro_batch_size"], layout["num_microbatches"], layout["seq_length"]) == \
        (4, 4, 2, 2048)
    # TRL ModelConfig: r 16 on peft's default Llama targets q_proj, v_proj: 32 layers * 2 * 16 * (4096 + 4096)
    assert model["adapter"]["rank"] == 16 and model["trainable_param_count"] == 32 * 2 * 16 * 8192


def test_torchrun_deepspeed_and_python_launchers_give_the_world(tmp_path):
    for name, launcher, world in (("a.sh", "torchrun --nproc_per_node 8", 8), ("b.sh", "deepspeed --num_gpus 8", 8),
                                  ("c.sh", "python", 1)):
        path = _setup(tmp_path, f"{launcher} train.py {TRL_ARGS}\n", {}, name=name)
        assert _layout(path)["layout"]["world_size"] == world, launcher


def test_bool_flags_and_dashed_spellings_follow_hfargumentparser(tmp_path):
    ds = dict(DS_AUTO, bf16={"enabled": True})
    script = ("torchrun --nproc_per_node 2 train.py --model_name_or_path meta-llama/Llama-2-7b-hf "
              "--per-device-train-batch-size=4 --bf16 false --fp16 --deepspeed ds.json --max_length 1024 "
              "--output_dir out\n")
    path = _setup(tmp_path, script, {}, ds)
    code, found = _check(path)
    mismatch = [d for d in found if d["code"] == "FT001"]
    # `--bf16 false` turns bf16 off; ds bf16.enabled=true vs hf False is refused, reported at the value `false`
    assert code == 1 and [(d["path"], d["col"], d["pointer"]) for d in mismatch] == \
        [(path, _col(script, "false"), "--bf16")]


def test_trl_cli_config_file_then_flags_then_accelerate_options(tmp_path):
    yaml = ("model_name_or_path: meta-llama/Llama-2-7b-hf\nper_device_train_batch_size: 8\nmax_length: 2048\n"
            "bf16: true\ndeepspeed: ds.json\nuse_peft: true\n")
    path = _setup(tmp_path, "trl sft --config trl.yaml --per_device_train_batch_size 2 --num_processes 4\n",
                  {"trl.yaml": yaml})
    layout = _layout(path)["layout"]
    assert (layout["world_size"], layout["micro_batch_size"], layout["seq_length"]) == (4, 2, 2048)


def test_a_command_line_file_reads_the_same(tmp_path):
    path = _setup(tmp_path, "FORCE_TORCHRUN=1 NPROC_PER_NODE=4 llamafactory-cli train sft.yaml\n",
                  {"sft.yaml": LF_YAML}, name="cmd.txt")
    assert _layout(path)["layout"]["world_size"] == 4


def test_an_unknown_value_keeps_the_default_and_says_so(tmp_path):
    script = "python train.py --model_name_or_path meta-llama/Llama-2-7b-hf --per_device_train_batch_size $BS " \
             "--max_length 1024 --output_dir o --deepspeed ds.json\n"
    data = _layout(_setup(tmp_path, script, {}))
    assert data["layout"]["micro_batch_size"] == 8  # TrainingArguments' per_device_train_batch_size default
    assert any(f":1:{_col(script, '--per_device')}: --per_device_train_batch_size $BS is not known statically" in n
               for n in data["notes"])


# -- bad input ----------------------------------------------------------------------------------------------------
def test_an_unparsable_deepspeed_file_is_exit_2_with_its_location(tmp_path):
    path = _setup(tmp_path, "llamafactory-cli train sft.yaml\n", {"sft.yaml": LF_YAML})
    (tmp_path / "ds.json").write_text('{"zero_optimization": {"stage": 3,}\n')
    code, out, err = run_guard("estimate", path)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "ds.json:2:1:" in err
    code, out, _ = run_guard("check", path)
    assert code == 2 and "GRD002" in out
    (tmp_path / "ds.json").write_text("[1]\n")
    code, out, err = run_guard("estimate", str(tmp_path / "sft.yaml"))
    assert code == 2 and "ds.json:1:1: a DeepSpeed config must be an object" in err
    assert run_guard("check", str(tmp_path / "sft.yaml"))[0] == 2


def test_a_missing_config_file_is_exit_2_at_its_word(tmp_path):
    script = "llamafactory-cli train nothere.yaml\n"
    path = _setup(tmp_path, script, {})
    code, _, err = run_guard("estimate", path)
    assert code == 2 and f"{path}:1:{_col(script, 'nothere')}:" in err and "Traceback" not in err
    code, found = _check(path)
    assert code == 2 and [d["code"] for d in found] == ["GRD001"]


def test_seq_length_from_the_command_line_only_where_the_config_has_none(tmp_path):
    """A plain HF Trainer program: TrainingArguments has no sequence length, so --seq-length sets it (and without
    it TRL SFT's 1024 is priced, said in a note). A LLaMA-Factory config decides its own cutoff_len: exit 2."""
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto",
                                                  "zero_optimization": {"stage": 2}}))
    script = tmp_path / "run.sh"
    script.write_text("deepspeed --num_gpus=4 main.py --deepspeed ds.json --model_name_or_path "
                      "meta-llama/Llama-2-7b-hf --output_dir out --per_device_train_batch_size 4 --fp16\n")
    code, out, _ = run_guard("estimate", str(script), "--format", "json")
    assert code == 0 and json.loads(out)["layout"]["seq_length"] == 1024
    code, out, _ = run_guard("estimate", str(script))
    assert "TrainingArguments has no sequence length" in out
    code, out, _ = run_guard("estimate", str(script), "--seq-length", "4096", "--format", "json")
    assert code == 0 and json.loads(out)["layout"]["seq_length"] == 4096
    config = tmp_path / "sft.yaml"
    config.write_text("model_name_or_path: meta-llama/Llama-2-7b-hf\nstage: sft\nfinetuning_type: lora\n"
                      "cutoff_len: 2048\n")
    code, _, err = run_guard("estimate", str(config), "--seq-length", "4096")
    assert code == 2 and "cutoff_len" in err and len(err.strip().splitlines()) == 1


def test_trls_older_max_seq_length_flag_is_a_number_too(tmp_path):
    # SFTConfig's max_seq_length (renamed max_length in TRL 0.20): HfArgumentParser types it as an int field
    path = _setup(tmp_path, "trl sft --model_name_or_path meta-llama/Llama-2-7b-hf --per_device_train_batch_size 2 "
                            "--max_seq_length 4096 --deepspeed ds.json --bf16\n", {})
    assert _layout(path)["layout"]["seq_length"] == 4096
