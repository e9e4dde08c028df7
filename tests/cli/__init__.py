"""The command line: output, exit codes, errors."""
