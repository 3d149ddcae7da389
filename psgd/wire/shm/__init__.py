"""Same-host data path: shared-memory segments and their doorbells."""

# The process table the segments and doorbells are found through (tests point it elsewhere).
PROC = "/proc"
