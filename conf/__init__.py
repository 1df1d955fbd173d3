"""mcp-gym's Hydra configs (installed as the package ``mcp_gym.conf``; see ``config.yaml``)."""
