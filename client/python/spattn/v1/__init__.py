"""Generated stubs of proto/spattn/v1 (run client/python/gen_stubs.sh)."""
