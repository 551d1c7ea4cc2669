"""One module per ``dlproc`` subcommand; see ``dlproc.cli``."""
