"""Everything that measures. Nothing outside psgd.bench imports it."""
