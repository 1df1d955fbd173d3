"""A stdio MCP server that reads its ``initialize`` request and never answers it: a server stuck in its handshake.

Run as ``python _held_handshake_server.py PIDFILE``: once the request has arrived it appends its pid to ``PIDFILE``
(the client is then waiting for the answer), then sleeps, ignoring the end of its stdin, until it is killed."""

from __future__ import annotations

import os
import sys
import time

if __name__ == "__main__":
    sys.stdin.buffer.readline()
    with open(sys.argv[1], "a") as f:
        f.write(f"{os.getpid()}\n")
    while True:
        time.sleep(3600)
