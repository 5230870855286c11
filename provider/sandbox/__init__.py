"""A job in a hardened container: runner, docker options, egress fence, /out volume, input files."""
