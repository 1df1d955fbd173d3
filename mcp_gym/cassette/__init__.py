"""Record and replay MCP servers: cassettes make benchmarks on live servers reproducible, offline.

**Record.** Any server spec takes ``record=path`` (a ``.jsonl`` file, or a directory that receives
``<alias>.jsonl``; by convention ``<run>/cassettes/``, next to the trajectory files)::

    env = MCPEnv({"memory": Stdio("mcp-server-memory", record="runs/mem/cassettes")}, tasks)

A server whose command line or environment names ``{workspace}`` (started per episode in a fresh temporary folder)
cannot record: its requests and results hold each episode's own path, and a replay starts no workspace, so ``MCPEnv``
refuses ``record=`` on it in one line (:func:`~mcp_gym.cassette.recorder.refuse_workspace_recording`); its
trajectories (``RecordTrajectories``) keep such episodes.

Every exchange of that connection is appended to the cassette: the negotiated protocol version, server info and
capabilities, then each request (method, canonical params, result or JSON-RPC error) and each notification, in the
order they happened, per episode.

**Replay.** :class:`Replay` is a server spec that answers from a cassette, in-process, with the original server
absent; :func:`serve_replay` (``mcp-gym serve --replay``) serves a cassette over stdio or Streamable HTTP::

    env = MCPEnv({"memory": Replay("runs/mem/cassettes/memory.jsonl")}, tasks)   # same tools, results, rewards

**File format** (``mcp-gym-cassette`` version 1): JSON Lines, UTF-8, one JSON object per line, appended with one
``write`` per line (``O_APPEND``) as events complete, so a crash loses at most the line being written and a torn last
line is skipped on reading; several connections (restarts, processes of a vector env) may append to one file. Kinds:

* ``header`` - written when a connection is established, so the first line of every file is one: ``format``,
  ``version``, ``connection`` (id of this connection), ``alias``, ``transport``, ``target``, ``protocol_version``,
  ``server_info``, ``capabilities``, ``instructions``, ``library_version``, ``t``.
* ``episode`` - the first time a connection sees an episode: ``connection``, ``episode`` (the recorded episode id,
  which joins the trajectory files' ``episode_id``), ``task_id``, ``seed``, ``t``.
* ``request`` - ``connection``, ``episode`` (``null`` before the first episode), ``seq``, ``method``, ``params``,
  then ``result`` (the MCP result object) or ``error`` (``{code, message, data}``), ``t`` (start, Unix seconds) and
  ``duration``. A paginated ``tools/list`` is stored as one page holding every tool.
* ``notification`` - ``connection``, ``episode``, ``seq``, ``method``, ``params``, ``t``; ``via: "listen"`` when it
  came on a 2026-07-28 ``subscriptions/listen`` stream.

``seq`` counts per connection: a request takes its number when it is *sent* (its line is written when it completes),
a notification when it *arrives*; a notification belongs to the last request sent before it on its connection (the
call it happened during, or right after). Requests without an episode in ``_meta`` (``resources/list``) belong to
the connection's current episode. Params are canonical: ``_meta`` keys that differ between runs (episode id, task,
seed, progress tokens, SDK envelope keys ``io.modelcontextprotocol/*``) are dropped, and matching compares JSON with
sorted keys. Session plumbing (``initialize``, ``resources/subscribe``, ``logging/setLevel``, ``subscriptions/listen``,
``ping``) is not recorded: the replay server acknowledges it.

**Matching on replay.** A new episode (a new ``mcp-gym/episode`` id) is mapped to a recorded episode with the same
``(task_id, seed)`` (sent as ``_meta`` by the env), the least replayed first, in recording order; without them, the
next recorded episode in order. Within an episode, the k-th occurrence of a call ``(method, canonical params)`` gets
the k-th recorded answer. Listings (``tools/list``, ``resources/list``, ...) and ``resources/read`` are side-effect
free and match by position instead: the answer recorded after the last replayed call (if no other call came between),
else the latest one before it - so a read repeated or moved by notification timing still sees its step's state. The
notifications recorded with a request are sent again while answering it (era-aware: handshake
``notifications/...`` or ``subscriptions/listen`` events) and, for ``tools/call``, also listed under the result's
``_meta["mcp-gym/changes"]`` so the env applies them in the same step. A request that was never recorded gets a tool
result with ``isError`` (``tools/call``) or a JSON-RPC error :data:`REPLAY_MISS` (other methods, and every method
with ``strict=True``) whose message names the closest recorded call.

Layout: ``format`` (constants, canonical params, cassette paths), ``recorder`` (the connection tap), ``reader``
(:class:`Cassette`), ``replay`` (:class:`ReplayServer`), ``spec`` (:class:`Replay` and the cassette finders),
``serve`` (stdio/HTTP serving and ``python -m mcp_gym.cassette``).
"""

from __future__ import annotations

from mcp_gym.cassette.format import cassette_dir, cassette_path
from mcp_gym.cassette.reader import Cassette, CassetteError
from mcp_gym.cassette.recorder import record_servers
from mcp_gym.cassette.replay import ReplayServer
from mcp_gym.cassette.serve import main
from mcp_gym.cassette.spec import Replay, replay_servers

__all__ = [
    "Cassette",
    "CassetteError",
    "Replay",
    "ReplayServer",
    "cassette_path",
    "cassette_dir",
    "record_servers",
    "replay_servers",
    "main",
]
