"""``python -m mcp_gym.cassette PATH``: serve a cassette (see :func:`mcp_gym.cassette.serve.main`)."""

from mcp_gym.cassette.serve import main

if __name__ == "__main__":
    main()
