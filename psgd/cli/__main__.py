"""`python -m psgd.cli ...`: how the launcher starts its children, and torchrun's `-m psgd.cli run`."""
import sys

from psgd.cli import main

sys.exit(main())
