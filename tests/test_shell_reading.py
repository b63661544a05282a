"""How guard reads launch scripts in the wild: `bash -c` strings, multi-line program strings, recovery after a
syntax error, files sorted by content, SH001 at bash's own line, and the files a folder walk skips. Expected
lines and columns are counted by hand from the texts below, or taken from `bash -n` itself."""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import run_guard

MODEL = ("--num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
         "--max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 64 --lr 1e-4 --train-iters 100")


def _check(tmp_path, name: str, text: str, *args: str) -> tuple[int, list[dict], str]:
    path = tmp_path / name
    path.write_text(text)
    code, out, err = run_guard("check", "--isolated", "--format", "json", *args, str(path))
    assert "Traceback" not in err
    return code, json.loads(out), err


def _codes(diags: list[dict]) -> list[str]:
    return sorted(f"{d['code']}@{d['line']}:{d['col']}" for d in diags)


# -- files sorted by content ---------------------------------------------------------------------------------
DS_JSON = '{"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}\n'


def test_a_json_deepspeed_config_named_conf_is_read_as_a_deepspeed_config(tmp_path):
    code, diags, _ = _check(tmp_path, "ds.conf", DS_JSON)
    # 30 is not a multiple of 4 * 2: DS301 at the value 30 (line 1, column 22, counted by hand)
    assert "DS301@1:22" in _codes(diags) and not [d for d in diags if d["code"].startswith("SH")]
    assert code == 1


def test_yaml_content_without_a_yaml_name_is_read_as_yaml(tmp_path):
    text = "train_batch_size: 30\ntrain_micro_batch_size_per_gpu: 4\ngradient_accumulation_steps: 2\n"
    _, diags, _ = _check(tmp_path, "ds.cfg", text)
    assert "DS301@1:19" in _codes(diags)


def test_a_script_named_json_is_read_as_a_script(tmp_path):
    _, diags, _ = _check(tmp_path, "run.json", "#!/bin/bash\necho hello\n")
    assert [d["code"] for d in diags] == ["SH003"]


def test_load_document_picks_the_format_by_content(tmp_path):
    from guard.sources.loader import load_document

    (tmp_path / "ds.conf").write_text(DS_JSON)
    (tmp_path / "ds.txt").write_text("train_batch_size: 30\n")
    (tmp_path / "ds.yaml").write_text('{"train_batch_size": 8}\n')  # JSON is YAML too; read as JSON
    assert load_document(str(tmp_path / "ds.conf")).data["train_batch_size"] == 30
    assert load_document(str(tmp_path / "ds.txt")).format == "yaml"
    assert load_document(str(tmp_path / "ds.yaml")).format == "json"


# -- multi-line program strings ---------------------------------------------------------------------------------
def test_a_quoted_multi_line_command_keeps_its_line_breaks_as_blanks(tmp_path):
    # the line breaks inside the quotes are word breaks for `$CMD`; guard used to drop them, gluing
    # `8` + `pretrain_gpt.py` + `--num-layers` into one word (torchrun's value) and taking `24` for the program
    text = ("#!/bin/bash\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n"
            'CMD="torchrun --nproc-per-node 8\n'                                  # line 3
            "pretrain_gpt.py\n"
            f"{MODEL}\n"                                                          # line 5
            '--tensor-model-parallel-size 3"\n'                                   # line 6
            "$CMD\n")
    _, diags, _ = _check(tmp_path, "train.sh", text)
    # heads 16 at column 57 + 1 of line 5; the 3 at column 30 of line 6; torchrun 1 x 8 = 8 ranks
    assert _codes(diags) == ["MLM101@6:30", "MLM102@5:58", "MLM201@6:30"]
    assert "world size 8" in next(d for d in diags if d["code"] == "MLM101")["message"]


def test_string_values_are_the_ones_bash_gives():
    from guard.shell.interpreter import interpret

    # bash: printf %q "$CMD" gives $'python x.py   --a 1--b 1  2\n\n' (continuations dropped, newlines kept)
    text = 'X=1\nY=2\nCMD="python x.py \\\n  --a 1\\\n--b $X \\\n $Y\n\n"\n'
    assert interpret("t.sh", text).variables["CMD"].value.text == "python x.py   --a 1--b 1  2\n\n"


def test_eval_of_a_multi_line_string_with_an_unknown_part_is_split_into_words(tmp_path):
    text = ("#!/bin/bash\n"
            'CMD="torchrun --nproc-per-node 8 pretrain_gpt.py\n'
            f"  {MODEL} --save $CKPT\n"
            '  --tensor-model-parallel-size 3"\n'
            'eval "$CMD"\n')
    _, diags, _ = _check(tmp_path, "train.sh", text)
    codes = _codes(diags)
    # 16 heads are not a multiple of TP 3: MLM102 at the 16 (line 3, column 60); TP 3 does not divide the 8
    # ranks: MLM101 at the 3 (line 4, column 32)
    assert "MLM102@3:60" in codes and "MLM101@4:32" in codes
    assert not [c for c in codes if c.startswith(("SH003", "MLM001", "MLM005"))]


# -- strings run by bash -c -----------------------------------------------------------------------------------
SLURM_HEAD = "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n"


def test_srun_bash_c_with_a_double_quoted_string_is_read_and_judged(tmp_path):
    text = (SLURM_HEAD +
            'LAUNCHER="torchrun --nproc-per-node 8 --nnodes 2"\n'                        # line 4, not exported
            f'CMD="pretrain_gpt.py {MODEL} --tensor-model-parallel-size 3"\n'           # line 5
            "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
            'srun --jobid $SLURM_JOBID bash -c "$LAUNCHER --node_rank \\$SLURM_PROCID $CMD" 2>&1 | tee log\n')
    _, diags, _ = _check(tmp_path, "train.slurm", text)
    codes = _codes(diags)
    # the 3 after --tensor-model-parallel-size sits at column 21 + len(MODEL) + 31 of line 5 (where CMD is
    # written); heads 16 at column 21 + 57 + 1 = 79 of line 5; 16 ranks (torchrun 2 x 8) are not divisible by TP 3
    tp_col = len('CMD="pretrain_gpt.py ') + len(MODEL) + len(" --tensor-model-parallel-size ") + 1
    assert f"MLM101@5:{tp_col}" in codes and "MLM102@5:79" in codes
    assert not [c for c in codes if c.startswith(("SH003", "MLM001", "MLM005", "MLM111"))]
    world = next(d for d in diags if d["code"] == "MLM101")
    assert "world size 16" in world["message"]


def test_bash_lc_with_a_single_quoted_string_sees_exported_variables_only(tmp_path):
    body = ('export LAUNCHER="torchrun --nproc-per-node 8"\n'
            f'export CMD="pretrain_gpt.py {MODEL} --tensor-model-parallel-size 3"\n'
            "srun bash -lc '$LAUNCHER $CMD'\n")
    _, diags, _ = _check(tmp_path, "exported.sh", "#!/bin/bash\n" + body)
    assert "MLM101@3:" + str(len('export CMD="pretrain_gpt.py ') + len(MODEL) + 31) in _codes(diags)
    # not exported: the new shell sees $CMD empty, so no launch is found and nothing is judged
    _, diags, _ = _check(tmp_path, "local.sh", "#!/bin/bash\n" + body.replace("export ", ""))
    assert [d["code"] for d in diags] == ["SH003"]


def test_a_bash_c_string_carries_the_command_environment_and_its_own_exports(tmp_path):
    text = ("#!/bin/bash\n"
            f"OMP_NUM_THREADS=1 bash -c 'export CUDA_DEVICE_MAX_CONNECTIONS=1; torchrun --nproc-per-node 4 "
            f"pretrain_gpt.py {MODEL} --tensor-model-parallel-size 2'\n")
    _, diags, _ = _check(tmp_path, "env.sh", text)
    # TP 2 divides 16 heads and 4 ranks, CUDA_DEVICE_MAX_CONNECTIONS is exported inside the string: clean
    assert [d for d in diags if d["severity"] != "info"] == []


def test_interpreter_positions_of_a_bash_c_string_map_back_to_the_file():
    from guard.shell.interpreter import interpret

    text = 'A="--tp 2"\nsrun -N 1 sh -xc "torchrun x.py $A --pp  4"\n'
    script = interpret("t.sh", text)
    words = [(w.text, w.span().line, w.span().col) for w in script.commands[-1].words]
    # srun -N 1 come from line 2; `--tp 2` from line 1 (where A is written); `--pp 4` from the string
    assert words == [("srun", 2, 1), ("-N", 2, 6), ("1", 2, 9), ("torchrun", 2, 19), ("x.py", 2, 28),
                     ("--tp", 1, 4), ("2", 1, 9), ("--pp", 2, 36), ("4", 2, 42)]


def test_blanks_before_an_expansion_inside_a_string_are_kept():
    from guard.shell.interpreter import interpret

    script = interpret("t.sh", 'A=1\nB=2\nX="$A $B"\nY="a $(date) ${B} "\n')
    assert script.variables["X"].value.text == "1 2"
    assert script.variables["Y"].value.text == "a $(date) 2 "


# -- SH001 at bash's line; recovery after the error ----------------------------------------------------------
BROKEN = {
    "double_quote.sh": 'TP=2\nPP=1\nX="abc\nY=3\ntorchrun pretrain_gpt.py --num-layers 2\n',
    "single_quote.sh": "TP=2\nPP=1\nX='abc\nY=3\ntorchrun pretrain_gpt.py --num-layers 2\n",
    "case_no_esac.sh": "TP=2\ncase $TP in\n  2) echo two ;;\nesca\nY=3\n",
    "case_at_eof.sh": "TP=2\ncase $TP in\n  2) echo two ;;\n",
    "placeholder.sh": "TP=2\nDATA=<path to data>\ntorchrun pretrain_gpt.py --data-path $DATA\n",
    "placeholder_flag.sh": "TP=2\ntorchrun pretrain_gpt.py --num-layers 2 --save <ckpt>\n",
    "unmatched_fi.sh": "TP=2\necho x\nfi\nY=3\n",
    "unmatched_done.sh": "TP=2\necho x\n  done\nY=3\n",
    "if_no_fi.sh": "TP=2\nif [ $TP = 2 ]; then\n  echo x\nY=3\n",
    "subst.sh": "TP=2\nX=$(echo a\nY=3\n",
    "backtick.sh": "TP=2\nX=`echo a\nY=3\n",
    "pipe_first.sh": "TP=2\nX=$(\n  | sed s/a/b/)\n",
    "continued_paren.sh": "TP=2\ntorchrun x.py --a 1 (\\\n  --b 2\n",
}


# valid bash that a simpler reader trips on (the first is from argonne-lcf/Megatron-DeepSpeed's ALCF scripts)
VALID = {
    "process_substitution.sh": "source <(curl -s https://x/utils.sh) && setup_env\ndiff <(ls a) >(cat)\n",
    "functions_and_case.sh": ("f() { echo $1; }\nfunction g {\n  case $1 in\n    a|b) echo ab ;;\n    (c) echo c\n"
                              "  esac\n}\nlocal_arr() { local A=(1 2); }\n"),
    "arrays_and_tests.sh": ("A=(\n  --x 1  # a comment\n  --y \"$(date)\"\n)\n[[ $x =~ ^(a|b)$ ]] && echo y\n"
                            "(( i = 1 + 2 ))\nfor ((i=0; i<3; i++)); do echo; done\n"),
    "redirections.sh": "cmd >/dev/null 2>&1 &\nexec 3<>/tmp/f\n> empty.txt\ncat <<-EOF | tee x\n\tbody\n\tEOF\n",
}


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is the oracle")
@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_bash_gives_no_sh001(tmp_path, name):
    path = tmp_path / name
    path.write_text(VALID[name])
    assert _bash_line(path) is None, f"bash -n refuses {name}: the case is wrong"
    _, diags, _ = _check(tmp_path, name, VALID[name])
    assert not [d for d in diags if d["code"] == "SH001"]


def _bash_line(path) -> int | None:
    import re
    import subprocess

    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    found = re.search(r"line (\d+): (?!warning)", done.stderr)
    return int(found.group(1)) if done.returncode and found else None


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is the oracle")
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_sh001_is_reported_at_the_line_bash_names(tmp_path, name):
    path = tmp_path / name
    path.write_text(BROKEN[name])
    expected = _bash_line(path)
    assert expected is not None, f"bash -n accepts {name}: the case is wrong"
    _, diags, _ = _check(tmp_path, name, BROKEN[name])
    assert [d["line"] for d in diags if d["code"] == "SH001"] == [expected]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is the oracle")
def test_unterminated_single_quote_and_case_are_not_put_at_line_1(tmp_path):
    for name in ("single_quote.sh", "case_no_esac.sh"):
        _, diags, _ = _check(tmp_path, name, BROKEN[name])
        lines = [d["line"] for d in diags if d["code"] == "SH001"]
        # the quote opens on line 3; `esca` (a pattern with no `)`) is on line 4
        assert lines == [3 if name == "single_quote.sh" else 4]


def test_a_heredoc_without_its_end_is_no_syntax_error(tmp_path):
    # bash only warns ("here-document delimited by end-of-file") and runs the script
    _, diags, _ = _check(tmp_path, "heredoc.sh", "TP=2\ncat > ds.json <<EOF\n{}\nEO\n")
    assert not [d for d in diags if d["code"] == "SH001"]


def test_after_a_syntax_error_the_variables_before_it_are_kept_and_nothing_after_runs():
    from guard.shell.interpreter import interpret

    text = ("TP=2\n"                                         # line 1: runs
            "DATA=<path to data>\n"                          # line 2: bash stops here
            "PP=4\n"
            "torchrun pretrain_gpt.py --num-layers 2 --tensor-model-parallel-size $TP\n")
    script = interpret("t.sh", text)
    assert script.variables["TP"].value.text == "2" and "PP" not in script.variables
    assert script.commands == []  # no phantom command from the pieces after `<path`
    (finding,) = script.findings
    assert finding.message.startswith("bash: syntax error near unexpected token `newline'")
    assert (finding.span.line, finding.span.col) == (2, 20)  # the newline after `>` (bash: token `newline')
    assert "lines 2-4 are not run" in finding.message


def test_a_template_is_judged_as_if_its_placeholders_were_filled(tmp_path):
    text = ("#!/bin/bash\nTP=2\n"
            "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers <layers> --tensor-model-parallel-size $TP\n")
    _, diags, _ = _check(tmp_path, "template.sh", text)
    codes = _codes(diags)
    # bash accepts the line (`< layers`, `> --tensor-model-parallel-size`) and fails at run time: no file
    # `layers`; the placeholder starts at column 58 of line 3 (counted by hand)
    assert "SH004@3:58" in codes and "SH003@1:1" not in codes  # said, and the command is still judged
    # judged as if filled with a value guard does not know: --num-layers is named unknown, never read as the text
    # "<layers>", and the template's real omission (no --hidden-size, ...) is found
    assert "MLM010@3:58" in codes and "MLM003@3:58" not in codes
    assert any(d["code"] == "MLM121" and "--hidden-size" in d["message"] for d in diags)
    # at the end of a line the `>` has no word: bash refuses the script there (SH001), and the rest is judged too
    _, diags, _ = _check(tmp_path, "template2.sh", text.replace(" --tensor-model-parallel-size $TP", ""))
    codes = _codes(diags)
    assert "SH001@3:66" in codes and "MLM010@3:58" in codes and "SH003@1:1" not in codes


def test_a_quoted_placeholder_is_a_value_unless_a_shell_reads_the_string_again(tmp_path):
    quoted = ('#!/bin/bash\nDATA="<path to data>"\n'
              'torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --data-path "$DATA" > log.txt\n')
    _, diags, _ = _check(tmp_path, "quoted.sh", quoted)
    assert "SH004" not in [d["code"] for d in diags]  # bash passes the string as written
    # `sh -c "$CMD"` parses the expanded text again: there `<path` is a redirection (Megatron-LLaMA's slurm
    # example); the finding points at the placeholder where it was written, line 2 column 7 (counted by hand)
    again = ('#!/bin/bash\nDATA="<path to data>"\n'
             'CMD="python pretrain_gpt.py --num-layers 2 --data-path 0.2 $DATA 0.8 other"\nsrun sh -c "$CMD"\n')
    _, diags, _ = _check(tmp_path, "again.sh", again)
    assert "SH004@2:7" in _codes(diags)

# -- the files a folder walk skips ------------------------------------------------------------------------------
def _folder(tmp_path):
    root = tmp_path / "jobs"
    (root / "sub").mkdir(parents=True)
    (root / "ds.conf").write_text(DS_JSON)                                  # checked: JSON content
    (root / "README.md").write_text("# notes\n")                           # not read
    (root / "sub" / "package.json").write_text('{"name": "x"}\n')          # read: no DeepSpeed key
    (root / "sub" / "run.sh").write_text("#!/bin/bash\necho hi\n")         # read: launches nothing
    (root / "sub" / "broken.sh").write_text("TP=2\nX=<path>\n")            # read: stops at a syntax error
    return root


def test_a_folder_walk_counts_and_lists_the_files_it_skipped(tmp_path):
    root = _folder(tmp_path)
    code, out, err = run_guard("check", "--isolated", str(root))
    assert code == 1 and err == ""
    lines = out.splitlines()
    assert lines[-2].endswith("in 1 file.")  # ds.conf alone was checked
    assert lines[-1].startswith("Skipped 4 files of the folders walked: ")
    for name, why in [("README.md", "not a config or a launch script"),
                      ("package.json", "JSON/YAML without a DeepSpeed key"), ("run.sh", "launches no Megatron program"),
                      ("broken.sh", "launches no Megatron program before its bash syntax error")]:
        assert name in lines[-1] and why in lines[-1]


def test_json_output_stays_a_list_and_the_skipped_files_go_to_stderr_and_sarif(tmp_path):
    root = _folder(tmp_path)
    code, out, err = run_guard("check", "--isolated", "--format", "json", str(root))
    assert isinstance(json.loads(out), list) and {d["path"] for d in json.loads(out)} == {str(root / "ds.conf")}
    assert err.startswith("guard: Skipped 4 files") and err.count("\n") == 1
    code, out, err = run_guard("check", "--isolated", "--format", "sarif", str(root))
    notes = json.loads(out)["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    uris = sorted(n["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].rsplit("/", 1)[1] for n in notes)
    assert uris == ["README.md", "broken.sh", "package.json", "run.sh"] and err == ""


def test_a_walked_file_taken_for_its_content_alone_is_skipped_when_it_does_not_parse(tmp_path):
    root = tmp_path / "jobs"
    root.mkdir()
    (root / "ds.conf").write_text('{"train_batch_size": GB_SIZE}\n')   # a template, JSON only once rendered
    (root / "ds.json").write_text('{"train_batch_size": GB_SIZE}\n')   # named JSON: its parse error is reported
    code, out, _ = run_guard("check", "--isolated", str(root))
    assert "ds.json:1:" in out and "ds.conf:" not in out.split("Skipped")[0]
    assert "1 looks like JSON or YAML but does not parse" in out


def test_files_named_on_the_command_line_are_never_skipped(tmp_path):
    root = _folder(tmp_path)
    code, out, _ = run_guard("check", "--isolated", str(root / "sub" / "run.sh"))
    assert "SH003" in out and "Skipped" not in out


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is the oracle")
def test_broken_variants_of_the_example_scripts_are_placed_where_bash_places_them(tmp_path):
    """A seeded mutation fuzz: a quote, a bracket, a closer, a placeholder or a redirection put anywhere
    (or a character taken out) in the repository's example scripts; guard's error line must be bash's."""
    import random

    from conftest import ROOT
    from guard.shell.bash_errors import first_error

    texts = [p.read_text() for p in sorted((ROOT / "examples").rglob("*.sh"))]
    pieces = ['"', "'", "`", "<path>", "$(", "${", "fi\n", "done\n", "}\n", "esac\n", "(", ")",
              "case $x in\n a) echo\n", "if true; then\n", " > \n", ";;", "<<EOF\n"]
    rng = random.Random(15)
    path, wrong = tmp_path / "m.sh", []
    for _ in range(150):
        text = rng.choice(texts)
        at = rng.randrange(len(text))
        text = text[:at] + text[at + 1:] if rng.random() < 0.3 else text[:at] + rng.choice(pieces) + text[at:]
        path.write_text(text)
        found = first_error(text)
        if _bash_line(path) != (found.line if found else None):
            wrong.append(text)
    assert not wrong, wrong[0]
