"""The command line: each module parses its arguments, calls the library and prints; nothing else."""
