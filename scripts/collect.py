"""`mcp-gym collect` as a script: `python scripts/collect.py [Hydra overrides]` (see `mcp_gym.cli`)."""

import sys

from mcp_gym.cli import main

if __name__ == "__main__":
    sys.exit(main(["collect", *sys.argv[1:]]))
