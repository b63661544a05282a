"""guard's Megatron argv parser against Python's own argparse, built from the same flag table
(allow_abbrev=False as Megatron): same accept/refuse verdict and the same values."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guard.diagnostic import Span
from guard.megatron import flag_table
from guard.megatron.argv import parse
from guard.token import ArgToken

TABLE = flag_table.load("main-d98e8a6")
SIMPLE_TYPES = {"int": int, "float": float, "str": str, None: None}
SIMPLE = [f for f in TABLE.flags
          if f.action in ("store", "store_true", "store_false") and f.type in SIMPLE_TYPES
          and f.nargs in (None, "+", "*")]


def argparse_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False, exit_on_error=False)
    for f in SIMPLE:
        kwargs = {"dest": f.dest, "action": f.action}
        if f.action == "store":
            kwargs.update(type=SIMPLE_TYPES[f.type], nargs=f.nargs)
            if f.choices is not None:
                kwargs["choices"] = list(f.choices)
        parser.add_argument(*f.option_strings, **kwargs)
    return parser


PARSER = argparse_parser()
NAMES = sorted({o for f in SIMPLE for o in f.option_strings})
SAMPLE = ["--num-layers", "--hidden-size", "--lr", "--bf16", "--normalization", "--split", "--seed",
          "--tensor-model-parallel-size", "--use-distributed-optimizer", "--no-gradient-accumulation-fusion",
          "--micro-batch-size", "--min-lr"]
SAMPLE = [n for n in SAMPLE if n in NAMES]
WORDS = st.sampled_from(SAMPLE + ["--num-layer", "--num_layers", "--tensor-model-paralel-size", "--"]) | \
    st.sampled_from(["2", "-1", "0.5", "1e-4", "-1e-4", "RMSNorm", "rmsnorm", "true", "949,50,1", "x", "-", "-.5"]) | \
    st.builds(lambda n, v: f"{n}={v}", st.sampled_from(SAMPLE), st.sampled_from(["3", "true", "RMSNorm", ""]))


def _tokens(words: list[str]) -> list[ArgToken]:
    return [ArgToken(w, Span(1, i + 1)) for i, w in enumerate(words)]


def _argparse(words: list[str]):
    """argparse's namespace, or None when it refuses the command line."""
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            namespace, extra = PARSER.parse_known_args(words)
        except (argparse.ArgumentError, SystemExit):
            return None
    return None if extra else namespace


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(WORDS, max_size=8))
def test_same_verdict_and_values_as_argparse(words):
    expected = _argparse(words)
    got = parse(_tokens(words), TABLE)
    assert (expected is None) == bool(got.problems), (words, [p.message for p in got.problems])
    if expected is not None:
        for occ in got.occurrences:
            assert getattr(expected, occ.flag.dest) == got.value(occ.flag.dest), (words, occ.flag.dest)


@pytest.mark.parametrize(("words", "kind"), [
    (["--num-layers"], "missing-value"),
    (["--num-layers", "--bf16"], "missing-value"),
    (["--bf16=1"], "extra-value"),
    (["--num-layer", "2"], "unknown"),
    (["--num-layers", "2.0"], "bad-type"),
    (["--normalization", "rmsnorm"], "bad-choice"),
    (["stray"], "stray"),
])
def test_problem_kinds(words, kind):
    assert [p.kind for p in parse(_tokens(words), TABLE).problems] == [kind]


def test_repeated_flag_keeps_last_and_negative_numbers_are_values():
    got = parse(_tokens(["--micro-batch-size", "4", "--micro-batch-size", "2", "--seed", "-1"]), TABLE)
    assert got.value("micro_batch_size") == 2 and got.value("seed") == -1 and not got.problems


def test_dataclass_boolean_has_both_negative_spellings():
    # TransformerConfig.tp_comm_bulk_wgrad: bool = True -> store_false under --no-X and --disable-X
    for spelling in ("--no-tp-comm-bulk-wgrad", "--disable-tp-comm-bulk-wgrad"):
        assert parse(_tokens([spelling]), TABLE).value("tp_comm_bulk_wgrad") is False
