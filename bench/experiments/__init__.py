"""One-off studies: each answered one question once (bench/experiments/README.md)."""
