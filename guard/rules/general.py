"""GRD rules: problems with the input itself (unreadable, unparseable, nothing to check)."""

from guard.rules.registry import rule

UNREADABLE = rule(
    "GRD001", "unreadable-file", "error",
    "A path that cannot be read: missing, unreadable, or too large.",
    what="Reports a path given on the command line that guard cannot open as a file.",
    why="A pre-commit hook or CI job that silently skips a missing config would pass a broken "
        "change. guard exits with code 2 when any input is unreadable.",
    example="guard check ds_confg.json   # typo in the file name",
    use_instead="guard check ds_config.json",
)

SYNTAX_ERROR = rule(
    "GRD002", "syntax-error", "error",
    "The file is not valid JSON, hjson or YAML; the location of the first error is reported.",
    what="Reports the first syntax error of a config file with its line and column. Other files "
         "given in the same call are still checked.",
    why="DeepSpeed, transformers and accelerate refuse an unparseable config only when the job "
        "starts, after every rank has been scheduled. Template files with unrendered placeholders "
        "(`$GLOBAL_BATCH_SIZE`, `CONFIG_BATCH_SIZE`) fail the same way.",
    example='{\n  "train_batch_size": 32\n  "gradient_accumulation_steps": 1\n}',
    use_instead='{\n  "train_batch_size": 32,\n  "gradient_accumulation_steps": 1\n}',
)

NO_DEEPSPEED_KEYS = rule(
    "GRD003", "nothing-to-check", "info",
    "A file named on the command line holds no DeepSpeed configuration.",
    what="Tells you that a file you asked guard to check has no DeepSpeed key at its top level "
         "(or is not a JSON object), so no rule ran on it.",
    why="A config that nests everything under a wrong wrapper key, or a file passed by mistake, "
        "would otherwise pass silently.",
    example='{"deepspeed": {"train_batch_size": 32}}',
    use_instead='{"train_batch_size": 32}',
)
