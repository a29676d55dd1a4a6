"""litert-convert: the command line of litert_torch (convert, inspect, validate, bench)."""
