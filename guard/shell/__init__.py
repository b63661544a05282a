"""Bash launch scripts read statically: variables, arrays, heredocs and commands, with positions."""
