import sys

from engine.cli.main import run_command

sys.exit(run_command())
