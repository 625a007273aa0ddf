"""ptolab's batch stages: emit PyPTO's files, parse them, report, and the CLI."""
