"""ga-tfx test suite (a regular package: site-packages of the TFX stack holds a stray `tests`)."""
