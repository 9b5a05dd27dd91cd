"""ga-tfx pipelines and the `ga-tfx` command (depends on the library, never the reverse)."""
