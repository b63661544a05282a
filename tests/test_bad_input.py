"""Property tests: whatever the input, guard answers with located diagnostics and exit 0/1/2, never a traceback."""

from __future__ import annotations

import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import run_guard
from guard.sources.document import SourceError
from guard.sources.json_source import parse_json

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
KEYS = ["train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "zero_optimization",
        "stage", "offload_optimizer", "offload_param", "device", "fp16", "bf16", "enabled", "optimizer", "type",
        "params", "lr", "scheduler", "gradient_clipping", "prescale_gradients", "ratio", "nvme_path",
        "activation_checkpointing", "comet", "api_key", "expert_parallel", "data_types", "param_dtype", "aio",
        "compute_grad_norm", "stage3_gather_16bit_weights_on_model_save", "loss_scale", "zzz"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=False),
                    st.sampled_from(["auto", "true", "8", "cpu", "nvme", "AdamW", "", "fp16"]), st.text(max_size=5))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(st.sampled_from(KEYS), inner, max_size=5)),
                      max_leaves=25)
CONFIGS = st.dictionaries(st.sampled_from(KEYS), VALUES, max_size=8)


def _check(path, *args: str) -> list[dict]:
    code, out, err = run_guard("check", "--isolated", "--format", "json", *args, str(path))
    assert "Traceback" not in out + err and "internal error" not in err, err
    assert code in (0, 1, 2)
    diags = json.loads(out)
    assert all(d["line"] >= 1 and d["col"] >= 1 for d in diags)
    return diags


@SETTINGS
@given(data=st.binary(max_size=300))
def test_random_bytes(tmp_path, data):
    path = tmp_path / "ds_config.json"
    path.write_bytes(data)
    _check(path)


@SETTINGS
@given(text=st.text(alphabet=string.printable + "{}[]\":,ü€\ufeff", max_size=200))
def test_random_text_parses_or_fails_located(text):
    try:
        parse_json(text, "t")
    except SourceError as err:
        assert err.span.line >= 1 and err.span.col >= 1 and err.message


@SETTINGS
@given(config=CONFIGS, world=st.sampled_from([None, "1", "8", "96"]), context=st.sampled_from(["auto", "hf", "deepspeed"]))
def test_random_configs_never_crash_a_rule(tmp_path, config, world, context):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(config))
    args = ["--context", context] + (["--world-size", world] if world else [])
    diags = _check(path, *args)
    assert all(d["code"] != "GRD002" for d in diags)  # json.dumps output always parses


@SETTINGS
@given(config=CONFIGS)
def test_random_configs_as_yaml(tmp_path, config):
    import yaml

    path = tmp_path / "ds_config.yaml"
    path.write_text(yaml.safe_dump(config))
    _check(path)


def test_special_inputs(tmp_path):
    cases = {
        "empty.json": b"",
        "bom.json": b"\xef\xbb\xbf{\"train_batch_size\": 8}",
        "latin1.json": b"{\"train_batch_size\": 8, \"x\": \"\xe9\"}",
        "deep.json": b"[" * 100_000 + b"]" * 100_000,
        "deep_obj.json": b"{\"a\":" * 5000 + b"1" + b"}" * 5000,
        "nan.json": b"{\"train_batch_size\": NaN, \"gradient_clipping\": Infinity}",
        "huge.json": b"{\"train_batch_size\": 1" + b"0" * 5000 + b", \"gradient_clipping\": 1e400}",
        "binary.json": bytes(range(256)),
        "list.json": b"[1, 2, 3]",
        "deep.yaml": b"a:\n" + b"".join(b" " * i + b"- \n" for i in range(1, 400)),
        "bad.yaml": b"a: [1, 2\nb: {",
        "yaml_anchor.yaml": b"base: &b {stage: 2}\nzero_optimization:\n  <<: *b\n  stagee: 1\n",
    }
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        diags = _check(path)
        if name in ("empty.json", "latin1.json", "deep.json", "binary.json", "bad.yaml"):
            assert diags and diags[0]["code"] == "GRD002", (name, diags)
    code, out, err = run_guard("check", "--isolated", str(tmp_path / "missing.json"))
    assert code == 2 and "GRD001" in out and "Traceback" not in err
    code, out, _ = run_guard("check", "--isolated", str(tmp_path))  # a directory: walked, no crash
    assert code in (0, 1)


PLUGIN_KEYS = ["zero_stage", "zero3_save_16bit_model", "offload_optimizer_device", "deepspeed_config_file",
               "gradient_accumulation_steps", "zero3_init_flag", "zero_force_ds_cpu_optimizer", "zzz"]


@SETTINGS
@given(block=st.dictionaries(st.sampled_from(PLUGIN_KEYS), VALUES, max_size=6), mixed=SCALARS)
def test_random_accelerate_yaml(tmp_path, block, mixed):
    import yaml

    path = tmp_path / "accelerate.yaml"
    path.write_text(yaml.safe_dump({"compute_environment": "LOCAL_MACHINE", "distributed_type": "DEEPSPEED",
                                    "mixed_precision": mixed, "deepspeed_config": block}))
    _check(path)
