"""ga-tfx TFX components (depend on the ga_tfx library, never the reverse)."""
