"""``mcp-gym tasks generate`` on two more servers nobody here wrote (npm ``@kazuph/mcp-taskmanager``, a task planner
that keeps its requests in a JSON file, and npm ``mcp-sqlite``): what the generator got wrong there, in general, with
results and walks of the same shape.

* a lookup of an unknown id answered ``{"status": "task_not_found", "message": "No such task found"}`` with
  ``isError`` false, and four tasks asked for that message: a status that says the call failed is a failed call;
* a tool that says nothing about itself (no ``readOnlyHint``) made a state task for every call of it, though a call
  that left the workspace's files as they were changed nothing: "plan a request, then open task kswrwWwN" (a lookup
  that fails) was checked by the file the planning wrote;
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import npm_bin

from mcp_gym.jobs.proposers import ExploreProposer, Walk, _Step, reports_failure

ROOT = Path(__file__).resolve().parents[1]


def test_a_status_that_says_the_call_failed_is_a_failure() -> None:
    """``task_not_found`` and ``validation_failed`` say the call failed; ``done``, ``planned``, ``not_started`` and
    ``found`` do not."""
    for status in ("task_not_found", "Not Found", "error", "validation_failed", "INVALID_REQUEST"):
        assert reports_failure({"status": status, "message": "x"}) == f'"status": "{status}"', status
    assert reports_failure({"result": {"status": "request_not_found"}}) == '"status": "request_not_found"'
    for status in ("done", "planned", "not_started", "found", "notfound_count", "errorless"):
        assert reports_failure({"status": status}) is None, status


def test_an_unannotated_call_that_left_the_files_alone_makes_no_state_task() -> None:
    """A walk on @kazuph/mcp-taskmanager (no tool says whether it only reads): ``request_planning`` wrote the
    workspace's file, then ``open_task_details`` left it as it was. Only the planning makes a state task; the lookup
    made "plan a request, then open task kswrwWwN", checked by the file the planning wrote."""
    plan = _Step({"tool": "request_planning", "arguments": {"originalRequest": "x"}}, True,
                 {"status": "planned", "requestId": "req-1"}, mutates=True, same_files=False)
    look = _Step({"tool": "open_task_details", "arguments": {"taskId": "kswrwWwN"}}, True,
                 {"status": "task_details", "title": "x"}, mutates=True, same_files=True)
    walk = Walk([plan, look], [plan.value, look.value])
    proposals = list(ExploreProposer(seed=0).proposals(walk, 0))
    states = [p for p in proposals if "state" in p.check]
    assert [[c["tool"] for c in p.solution] for p in states] == [["request_planning"]], states
    assert any(p.solution[-1]["tool"] == "open_task_details" and "answer" in p.check for p in proposals)


def test_a_call_that_left_the_files_alone_is_no_step_of_a_later_task() -> None:
    """npm mcp-sqlite (no tool says whether it only reads): "call ``db_info``, then ``list_tables``, answer with
    ``$[1].name`` of step 2" carried a call the answer does not need. A call that left the workspace's files as they
    were is not a change the later calls need; one that changed them still is."""
    info = _Step({"tool": "db_info", "arguments": {}}, True, {"path": "db.sqlite"}, mutates=True, same_files=True)
    insert = _Step({"tool": "create_record", "arguments": {"table": "t", "data": {"x": 1}}}, True,
                   {"id": 3}, mutates=True, same_files=False)
    tables = _Step({"tool": "list_tables", "arguments": {}}, True, [{"name": "orders"}, {"name": "t"}],
                   mutates=True, same_files=True)
    walk = Walk([info, insert, tables], [info.value, insert.value, tables.value])
    last = [p for p in ExploreProposer(seed=0).proposals(walk, 0) if p.solution[-1]["tool"] == "list_tables"]
    assert last and all([c["tool"] for c in p.solution] == ["create_record", "list_tables"] for p in last), last


# -- the real server (npm, the pinned version installed into .mcp-gym-cache/npm/mcp-taskmanager on first use) ---------
# Heavy lane (about 1 min: a fresh server per run); fast cover: the tests above on walks of the same shapes
@pytest.mark.slow
@pytest.mark.thirdparty
@pytest.mark.timeout(1800)
def test_generated_taskmanager_tasks_ask_for_no_failure(tmp_path: Path) -> None:
    """The real npm @kazuph/mcp-taskmanager (1.1.1, :data:`conftest.NPM_TOOLS`) at ``n=8 seed=0``: no answer is a
    failed lookup's status or message, every state task's last call changed the file, and the tasks pass ``tasks
    validate``."""
    from mcp_gym.cli import main

    server = f'+env.servers.tm="env TASK_MANAGER_FILE_PATH={{workspace}}/tasks.json {npm_bin("mcp-taskmanager")}"'
    out = tmp_path / "gen"
    assert main(["tasks", "generate", "env=custom", server, "n=8", "seed=0", f"out={out}"]) == 0
    assert main(["tasks", "validate", "env=custom", server, f"env.tasks={out / 'tasks.jsonl'}",
                 f"out={tmp_path / 'validate'}"]) == 0
    rows = [json.loads(line) for line in (out / "tasks.jsonl").read_text().splitlines()]
    assert len(rows) == 8
    assert not [r for r in rows if str(r.get("answer")) in ("task_not_found", "No such task found")], rows
    states = [r for r in rows if "kind:state" in r["tags"]]
    assert all(json.loads(r["solution"])[-1]["tool"] in ("request_planning", "add_tasks_to_request", "update_task",
                                                          "delete_task", "mark_task_done", "approve_task_completion",
                                                          "approve_request_completion") for r in states), states


def test_a_claim_a_later_call_wrote_back_is_not_confirmed() -> None:
    """npm server-memory: "``delete_observations``, answer with its ``message``" (``Observations deleted
    successfully``, the server's word about its own change) was kept because a later ``create_entities`` was given
    that message as an ``entityType`` and ``read_graph`` then listed it. A read confirms a claim only when no call
    since the claim was given it; the same read with no such write between still confirms it."""
    said = "Observations deleted successfully"
    delete = _Step({"tool": "delete_observations", "arguments": {"deletions": []}}, True, {"message": said},
                   mutates=True, read_only=False)
    create = _Step({"tool": "create_entities", "arguments": {"entities": [{"name": "a", "entityType": said}]}}, True,
                   {"entities": [{"name": "a"}]}, mutates=True, read_only=False)
    graph = _Step({"tool": "read_graph", "arguments": {}}, True, {"entities": [{"name": "a", "entityType": said}]},
                  read_only=True)
    for steps, kept in (([delete, create, graph], False), ([delete, graph], True)):
        walk = Walk(steps, [s.value for s in steps])
        first = [p for p in ExploreProposer(seed=0).proposals(walk, 0)
                 if "answer" in p.check and len(p.solution) == 1 and p.solution[0]["tool"] == "delete_observations"]
        assert first and all((p.malformed is None) == kept for p in first), (kept, first)
