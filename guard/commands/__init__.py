"""The subcommands: each builds its objects from the parsed options and runs them; no command imports another."""
