"""Demo helpers: a tiny locally built Flux2Klein pipeline and warm-up calls."""
