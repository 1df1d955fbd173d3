"""`mcp-gym export-sft` as a script: `python scripts/export_sft.py [Hydra overrides]` (see `mcp_gym.cli`)."""

import sys

from mcp_gym.cli import main

if __name__ == "__main__":
    sys.exit(main(["export-sft", *sys.argv[1:]]))
