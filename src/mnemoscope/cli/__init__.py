"""Command-line interface (thin: parse, build a config, call a library function)."""
