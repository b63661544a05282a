"""The static bash interpreter and the launcher reader: values, positions and world sizes worked out by hand."""

from __future__ import annotations

import pytest

from guard.shell.interpreter import interpret
from guard.launchers.chain import find_launches


def _words(text: str, index: int = -1):
    script = interpret("t.sh", text)
    return [(w.text, w.span().line, w.span().col, w.resolved) for w in script.commands[index].words]


def test_arrays_defaults_arithmetic_and_positions():
    text = ("TP=${TP:-4}\n"                      # line 1: the default 4 sits at column 10
            "N=$((2 * 3))\n"
            "ARGS=(\n"
            "  --tp $TP  # comment\n"            # line 4
            "  --n \"$N\"\n"
            ")\n"
            "ARGS+=(--bf16)\n"
            "python x.py ${ARGS[@]} --lr=1e-4\n")
    assert _words(text) == [
        ("python", 8, 1, True), ("x.py", 8, 8, True),
        ("--tp", 4, 3, True), ("4", 1, 10, True),        # the value points where it was written
        ("--n", 5, 3, True), ("6", 2, 3, True),          # a computed value points at its expression
        ("--bf16", 7, 8, True), ("--lr=1e-4", 8, 24, True)]


def test_strings_split_unless_quoted_and_quoted_array_keeps_elements():
    text = 'S="--a 1 --b 2"\nA=("--c 3" --d)\npython x.py $S "$S" "${A[@]}"\n'
    assert [w[0] for w in _words(text)] == ["python", "x.py", "--a", "1", "--b", "2", "--a 1 --b 2",
                                            "--c 3", "--d"]


def test_unknown_values_are_marked_not_guessed():
    text = 'python x.py --tp $TP --save $1 --n ${N:-2} --m $(nproc)\n'
    words = {w[0]: w[3] for w in _words(text)}
    assert words["$TP"] is False and words["$1"] is False and words["$(nproc)"] is False
    assert words["2"] is True


def test_decidable_if_takes_one_branch_undecidable_if_makes_value_unknown():
    text = ('MODE=${MODE:-mock}\n'
            'if [[ "$MODE" == "mock" ]] || [ -z "$X" ]; then A=1; else A=2; fi\n'
            'if [ "$CLUSTER" = "big" ]; then B=8; else B=4; fi\n'
            'if [ ! -f "$P" ]; then echo missing; exit 1; fi\n'
            'python x.py --a $A --b $B\n')
    words = _words(text)
    assert ("1", 2, 51, True) in words  # the then-branch value, where it is written
    assert [w for w in words if w[0] == "$B"][0][3] is False


def test_heredoc_source_and_sbatch(tmp_path):
    (tmp_path / "env.sh").write_text("GBS=32\n")
    script_path = tmp_path / "job.slurm"
    text = ("#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --gres=gpu:a100:4\n"
            "source ./env.sh\n"
            "cat <<EOT > ds.json\n{\"train_batch_size\": $GBS}\nEOT\n"
            "srun python x.py --n $SLURM_NNODES\n")
    script_path.write_text(text)
    script = interpret(str(script_path), text)
    (doc,) = script.heredocs
    assert doc.target.text == "ds.json" and doc.body.text == '{"train_batch_size": 32}\n'
    assert [w.text for w in script.commands[-1].words][-1] == "2"
    (launch,) = find_launches(script)
    assert launch.world_size is None  # srun without a task count, and #SBATCH gives none either


@pytest.mark.parametrize(("line", "world", "per_node"), [
    ("torchrun --nproc_per_node 8 --nnodes 2 train.py --x", 16, 8),
    ("torchrun --nproc-per-node=4 train.py", 4, 4),
    ("torchrun train.py", 1, 1),
    ("torchrun --nnodes 1:4 --nproc-per-node 2 train.py", 8, 2),           # elastic: the largest world
    ("python -m torch.distributed.launch --nproc_per_node 8 --use_env train.py", 8, 8),
    ("python -u -m torch.distributed.run --nnodes 2 --nproc_per_node 4 train.py", 8, 4),
    ("deepspeed --num_gpus 4 train.py", 4, 4),
    ("deepspeed --num_nodes 2 --num_gpus 8 --hostfile hosts train.py", 16, 8),
    ("deepspeed --include localhost:0,1,2 train.py", 3, 3),
    ("deepspeed --include w1:0,1@w2:0,1 train.py", 4, 2),
    ("deepspeed train.py", None, None),                                      # all local GPUs: unknown
    ("accelerate launch --num_processes 16 --num_machines 2 train.py", 16, 8),
    ("mpirun -np 32 -npernode 8 python train.py", 32, 8),
    ("srun -N 4 --ntasks-per-node 8 python train.py", 32, 8),
    ("srun --nodes 2 torchrun --nnodes 2 --nproc-per-node 8 train.py", 16, 8),
    ("python train.py", 1, None),
])
def test_world_size_of_launchers(line, world, per_node):
    (launch,) = find_launches(interpret("t.sh", line + "\n"))
    assert (launch.world_size, launch.gpus_per_node) == (world, per_node)
    assert launch.program.text == "train.py"


def test_dollar_after_slash_is_one_word():
    """tree-sitter-bash splits `$A/$B/c` in two; bash expands it as one word."""
    text = "W=/w\npython x.py --r $W/$W/c --p $UNSET/$W\n"
    assert [w[0] for w in _words(text)][3:] == ["/w//w/c", "--p", "$UNSET//w"]


def test_deepspeed_hostfile_beside_the_script(tmp_path):
    (tmp_path / "hosts").write_text("# cluster\nworker-1 slots=8\nworker-2 slots=8\nworker-3 slots=8\n")
    script = tmp_path / "run.sh"
    for line, world in (("deepspeed --hostfile hosts train.py", 24),
                        ("deepspeed -H hosts --num_nodes 2 train.py", 16),
                        ("deepspeed --hostfile hosts --num_nodes 2 --num_gpus 4 train.py", 8),
                        ("deepspeed --hostfile missing train.py", None)):
        script.write_text(line + "\n")
        (launch,) = find_launches(interpret(str(script), line + "\n"))
        assert launch.world_size == world, line


def test_eval_of_a_command_string_stops_at_its_redirection():
    text = 'CMD="python x.py --a 1 &> log.txt"\neval ${CMD}\n'
    assert [w[0] for w in _words(text)] == ["python", "x.py", "--a", "1"]


@pytest.mark.parametrize(("expr", "value"), [
    ("$((0x10 + 010))", "24"),          # hex and octal literals, as bash reads them
    ("$((7 / -2))", "-3"),              # C division truncates toward zero
    ("$((-7 % 3))", "-1"),
    ("$((2 > 1 ? 5 : 6))", "5"),
    ("$((2**99999999))", None),         # bash wraps at 64 bits; guard calls it unknown
    ("$((08))", None),                  # not a valid octal number: bash refuses it too
])
def test_arithmetic(expr, value):
    var = interpret("t.sh", f"X={expr}\n").variables["X"].value
    assert (var.text if var.resolved else None) == value


def test_a_templates_real_errors_are_found_past_its_placeholders():
    """`X=<Specify path>` is a bash syntax error (SH001, bash runs nothing after it); the script is then read as if
    the placeholder were filled in, so the flag typo further down is still reported, at its own place."""
    import json

    from conftest import FIXTURES, run_guard

    script = str(FIXTURES / "script_reading" / "template_typo.sh")
    code, out, _ = run_guard("check", "--isolated", "--format", "json", script)
    found = sorted(f"{d['code']}@{d['line']}:{d['col']}" for d in json.loads(out) if d["severity"] == "error")
    assert code == 1 and found == ["MLM001@6:3", "SH001@2:31"]


def test_computed_values_are_followed_or_named_unknown():
    """`EP=$(( NUM_GPUS < 64 ? NUM_GPUS : 64 ))` is bash arithmetic guard evaluates (16); TP set under an `if` on an
    environment variable is unknown: named by check (MLM010) and by estimate's refusal, never a flag default."""
    import json

    from conftest import FIXTURES, run_guard

    script = str(FIXTURES / "script_reading" / "computed_values.sh")
    code, out, _ = run_guard("check", "--isolated", "--format", "json", script)
    unknown = [d["message"] for d in json.loads(out) if d["code"] == "MLM010"]
    assert len(unknown) == 1 and "--tensor-model-parallel-size $TP" in unknown[0]
    code, _, err = run_guard("estimate", "--isolated", script)
    assert code == 2 and "--tensor-model-parallel-size (line 7) is not known statically" in err


def test_a_script_driven_by_its_arguments_gets_one_refusal_naming_each():
    """TP=$1 PP=$2 GBS=$3 SEQ=$4: every value the memory model reads is named with the argument it comes from, in
    one refusal, not one per run."""
    from conftest import FIXTURES, run_guard

    code, _, err = run_guard("estimate", "--isolated", str(FIXTURES / "script_reading" / "positional.sh"))
    assert code == 2 and err.count("\n") == 1
    for written in ("--tensor-model-parallel-size $1", "--pipeline-model-parallel-size $2",
                    "--global-batch-size $3", "--seq-length $4"):
        assert written in err


@pytest.mark.parametrize("form", [
    'CMD="torchrun --nproc-per-node 2 {job}"\neval $CMD\n',
    'CMD="torchrun --nproc-per-node 2 {job}"\nbash -c "$CMD"\n',
    'CMD="torchrun --nproc-per-node 2 {job}"\nsrun --ntasks 1 bash -c "$CMD"\n',
    'ARGS=(--nproc-per-node 2 {job})\ntorchrun "${{ARGS[@]}}"\n',
    'launch() {{\n  torchrun --nproc-per-node 2 "$@"\n}}\nlaunch {job}\n',
    'launch() {{\n  local np=$1\n  shift\n  torchrun --nproc-per-node $np "$@"\n}}\nlaunch 2 {job}\n'])
def test_commands_assembled_in_strings_arrays_and_functions_are_followed(tmp_path, form):
    """eval, bash -c, srun ... bash -c, "${ARGS[@]}" and a shell function forwarding "$@": the training command is
    found and its flag typo reported where it is written."""
    import json

    from conftest import run_guard

    job = ("pretrain_gpt.py --num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 128 "
           "--max-position-embeddings 128 --micro-batch-size 1 --vocab-size 1000 --tensor-model-paralel-size 1")
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\n" + form.format(job=job))
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(script))
    typo = [d for d in json.loads(out) if d["code"] == "MLM001"]
    assert code == 1 and len(typo) == 1 and "--tensor-model-paralel-size" in typo[0]["message"]
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if "paralel" in text)
    assert typo[0]["line"] == line


def test_an_exit_after_an_operator_does_not_end_the_script(tmp_path):
    """`mkdir -p X || { echo ...; exit 1; }` and `[ -z "$X" ] && exit`: guards against failure; bash goes on when
    the left side decides so, and the training command after them is read (it was dropped before)."""
    from conftest import run_guard

    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\nmkdir -p /tmp/logs || {\n  echo cannot\n  exit 1\n}\n[ -z \"$HOME\" ] && exit 2\n"
                      "(cd /tmp && exit 0)\n"
                      "torchrun --nproc-per-node 2 pretrain_gpt.py --num-layers 2 --tensor-model-paralel-size 1\n")
    code, out, _ = run_guard("check", "--isolated", str(script))
    assert code == 1 and "run.sh:8:60: MLM001" in out


def test_a_job_submitted_as_an_sbatch_heredoc_is_read_with_its_directives(tmp_path):
    """`sbatch <<EOF ... EOF`: the heredoc, expanded by the submitting shell (the delimiter is not quoted), is the
    batch script: its #SBATCH lines give srun its tasks (2 nodes x 8) and its command is judged."""
    import json

    from conftest import run_guard

    script = tmp_path / "submit.sh"
    script.write_text(
        "#!/bin/bash\nTP=4\nCMD=\"python pretrain_gpt.py --num-layers 2 --hidden-size 128 --num-attention-heads 4 "
        "--seq-length 128 --max-position-embeddings 128 --micro-batch-size 1 --vocab-size 1000 "
        "--tensor-model-parallel-size $TP --pipeline-model-parallel-size 3\"\n"
        "sbatch <<EOF\n#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=8\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n"
        "srun bash -c \"${CMD}\"\nEOF\n")
    code, out, _ = run_guard("check", "--isolated", "--format", "json", str(script))
    found = json.loads(out)
    # TP 4 x PP 3 = 12 does not divide the 16 tasks the directives give (hand count): Megatron refuses it
    assert code == 1 and any(d["code"] == "MLM101" and "16" in d["message"] for d in found), found
