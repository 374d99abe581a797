"""`python -m gate`: the same as the `gate` console script."""

from gate.cli import run

run()
