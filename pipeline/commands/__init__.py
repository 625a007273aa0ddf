"""One module per ``ptolab`` subcommand.

Each module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``; ``pipeline.cli`` discovers them, so adding a command is
adding a file.
"""
