"""bench.run on a CUDA GPU from a staging directory carried to a machine without network (stage.sh, run.sh)."""
