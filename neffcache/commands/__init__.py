"""One module per ``neffcache`` subcommand: parse, call the core, render. No logic here."""
