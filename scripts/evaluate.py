"""`mcp-gym eval` as a script: `python scripts/evaluate.py [Hydra overrides]` (see `mcp_gym.cli`)."""

import sys

from mcp_gym.cli import main

if __name__ == "__main__":
    sys.exit(main(["eval", *sys.argv[1:]]))
