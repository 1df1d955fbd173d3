"""Tests for mcp_gym.spaces: Utf8Text, ToolCallSpace, sample_from_schema."""

from __future__ import annotations

import copy
import json
import math
import pickle
import warnings
from typing import Any

import gymnasium
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator, validators

from mcp_gym.spaces import ActionError, ToolCallSpace, Utf8Text
from mcp_gym.spaces._sampler import _Generator, sample_from_schema
from mcp_gym.spaces.errors import _json_size_bound

# ---------------------------------------------------------------------------------------------------------------------
# Realistic MCP tool schemas
# ---------------------------------------------------------------------------------------------------------------------

# pydantic 2 / FastMCP for
#   def f(path: str, content: str, n: int = Field(ge=1, le=10), tags: list[str] | None = None,
#         mode: Literal["a", "b"] = "a")
PYDANTIC_F = {
    "properties": {
        "path": {"title": "Path", "type": "string"},
        "content": {"title": "Content", "type": "string"},
        "n": {"maximum": 10, "minimum": 1, "title": "N", "type": "integer"},
        "tags": {"anyOf": [{"items": {"type": "string"}, "type": "array"}, {"type": "null"}], "default": None,
                 "title": "Tags"},
        "mode": {"default": "a", "enum": ["a", "b"], "title": "Mode", "type": "string"},
    },
    "required": ["path", "content", "n"],
    "title": "fArguments",
    "type": "object",
}
# pydantic: nested model via $defs, optional str, Literal
PYDANTIC_ORDER = {
    "$defs": {"Item": {"properties": {"name": {"title": "Name", "type": "string"},
                                      "qty": {"minimum": 0, "title": "Qty", "type": "integer"}},
                       "required": ["name", "qty"], "title": "Item", "type": "object"}},
    "properties": {"items": {"items": {"$ref": "#/$defs/Item"}, "title": "Items", "type": "array"},
                   "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Note"},
                   "kind": {"enum": ["x", "y"], "title": "Kind", "type": "string"}},
    "required": ["items", "kind"], "title": "Order", "type": "object",
}
# pydantic: datetime, Enum via $ref, exclusive float bounds, set[int], dict[str, int], tuple[int, str]
PYDANTIC_MIXED = {
    "$defs": {"Color": {"enum": ["red", "blue"], "title": "Color", "type": "string"}},
    "properties": {
        "when": {"format": "date-time", "title": "When", "type": "string"},
        "color": {"$ref": "#/$defs/Color"},
        "score": {"exclusiveMaximum": 1, "exclusiveMinimum": 0, "title": "Score", "type": "number"},
        "ids": {"items": {"type": "integer"}, "maxItems": 3, "title": "Ids", "type": "array", "uniqueItems": True},
        "meta": {"additionalProperties": {"type": "integer"}, "default": {}, "title": "Meta", "type": "object"},
        "t": {"maxItems": 2, "minItems": 2, "prefixItems": [{"type": "integer"}, {"type": "string"}], "title": "T",
              "type": "array"},
    },
    "required": ["when", "color", "score", "ids", "t"], "title": "Q", "type": "object",
}
# pydantic: recursive model
PYDANTIC_TREE = {
    "$defs": {"Node": {"properties": {"name": {"title": "Name", "type": "string"},
                                      "children": {"default": [], "items": {"$ref": "#/$defs/Node"},
                                                   "title": "Children", "type": "array"}},
                       "required": ["name"], "title": "Node", "type": "object"}},
    "properties": {"root": {"$ref": "#/$defs/Node"}}, "required": ["root"], "title": "T", "type": "object",
}
# pydantic: discriminated union (oneOf + const), constrained str with pattern, float multipleOf
PYDANTIC_UNION = {
    "$defs": {
        "Cat": {"properties": {"kind": {"const": "cat", "title": "Kind", "type": "string"},
                               "lives": {"maximum": 9, "minimum": 0, "title": "Lives", "type": "integer"}},
                "required": ["kind", "lives"], "title": "Cat", "type": "object"},
        "Dog": {"properties": {"kind": {"const": "dog", "title": "Kind", "type": "string"},
                               "good": {"default": True, "title": "Good", "type": "boolean"}},
                "required": ["kind"], "title": "Dog", "type": "object"},
    },
    "properties": {
        "pet": {"discriminator": {"mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog"}, "propertyName": "kind"},
                "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}], "title": "Pet"},
        "note": {"default": "ab", "maxLength": 5, "minLength": 2, "pattern": "^[a-z]+$", "title": "Note",
                 "type": "string"},
        "ratio": {"default": 0.5, "maximum": 2, "minimum": 0, "multipleOf": 0.25, "title": "Ratio", "type": "number"},
    },
    "required": ["pet"], "title": "P", "type": "object",
}
# zod-to-json-schema (TypeScript SDK servers), e.g. the filesystem server's edit_file
ZOD_EDIT_FILE = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "edits": {"type": "array", "items": {"type": "object", "properties": {
            "oldText": {"type": "string", "description": "Text to search for - must match exactly"},
            "newText": {"type": "string", "description": "Text to replace with"}},
            "required": ["oldText", "newText"], "additionalProperties": False}},
        "dryRun": {"type": "boolean", "default": False, "description": "Preview changes using git-style diff format"},
    },
    "required": ["path", "edits"],
    "additionalProperties": False,
    "$schema": "http://json-schema.org/draft-07/schema#",
}
FETCH = {
    "type": "object",
    "properties": {
        "url": {"type": "string", "format": "uri", "minLength": 1, "description": "URL to fetch"},
        "max_length": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 1000000, "default": 5000},
        "start_index": {"type": "integer", "minimum": 0, "default": 0},
        "raw": {"type": "boolean", "default": False},
    },
    "required": ["url"],
}
GITHUB_SEARCH = {
    "type": "object",
    "properties": {
        "repo": {"type": "string", "pattern": r"^[\w.-]+/[\w.-]+$"},
        "since": {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
        "state": {"type": "string", "enum": ["open", "closed", "all"]},
        "labels": {"type": "array", "items": {"type": "string"}, "uniqueItems": True, "maxItems": 5},
        "per_page": {"type": "integer", "minimum": 1, "maximum": 100},
        "email": {"type": "string", "format": "email"},
    },
    "required": ["repo"],
    "additionalProperties": False,
}
DRAFT4_LEGACY = {
    "$schema": "http://json-schema.org/draft-04/schema#",
    "type": "object",
    "definitions": {"unit": {"type": "string", "enum": ["c", "f"]}},
    "properties": {
        "temp": {"type": "number", "minimum": -50, "exclusiveMinimum": True, "maximum": 60},
        "unit": {"$ref": "#/definitions/unit"},
        "point": {"type": "array", "items": [{"type": "number"}, {"type": "number"}], "additionalItems": False,
                  "minItems": 2},
    },
    "required": ["temp", "unit"],
}
ALLOF_AND_NULLABLE = {
    "type": "object",
    "properties": {
        "opts": {"allOf": [{"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 3}},
                            "required": ["a"]},
                           {"properties": {"b": {"type": ["string", "null"], "maxLength": 4}}, "required": ["b"]}]},
        "anything": {},
        "flag": True,
        "version": {"type": "string", "pattern": r"^v\d+\.\d+\.\d+$"},
        "uuid": {"type": "string", "format": "uuid"},
    },
    "required": ["opts", "anything", "flag"],
}
NO_ARGS = {"type": "object", "properties": {}}

CORPUS: dict[str, Any] = {
    "f": PYDANTIC_F, "order": PYDANTIC_ORDER, "mixed": PYDANTIC_MIXED, "tree": PYDANTIC_TREE,
    "union": PYDANTIC_UNION, "edit_file": ZOD_EDIT_FILE, "fetch": FETCH, "search": GITHUB_SEARCH,
    "legacy": DRAFT4_LEGACY, "allof": ALLOF_AND_NULLABLE, "ping": NO_ARGS,
}


def independent_validator(schema: Any) -> Any:
    """A fresh validator (class from $schema) with format checking, independent of the space's cache."""
    cls = validators.validator_for(schema, default=Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def assert_valid(schema: Any, value: Any) -> None:
    """Fail with the jsonschema message if value is invalid."""
    errors = [e.message for e in independent_validator(schema).iter_errors(value)]
    assert not errors, f"{value!r} invalid under {schema!r}: {errors}"


# ---------------------------------------------------------------------------------------------------------------------
# Utf8Text
# ---------------------------------------------------------------------------------------------------------------------


def test_utf8text_contains() -> None:
    space = Utf8Text()
    for good in ["", "hello world", "héllo wörld", "日本語のテキスト", "emoji 😀", "line\nbreak", "x" * 10_000]:
        assert space.contains(good) and good in space
    for bad in [b"bytes", None, 1, ["a"], np.str_("x").encode()]:
        assert not space.contains(bad)
    short = Utf8Text(max_length=3)
    assert "abc" in short and "日本語" in short and "" in short
    assert "abcd" not in short
    assert not space.is_np_flattenable


def test_utf8text_sample_eq_repr() -> None:
    a, b = Utf8Text(seed=7), Utf8Text(seed=7)
    samples = [a.sample() for _ in range(50)]
    assert samples == [b.sample() for _ in range(50)]
    assert all(isinstance(s, str) and 1 <= len(s) <= 12 and s in a for s in samples)
    assert len(set(samples)) > 40
    assert all(len(Utf8Text(max_length=2, seed=i).sample()) <= 2 for i in range(20))
    assert Utf8Text() == Utf8Text() and Utf8Text(5) == Utf8Text(5)
    assert Utf8Text() != Utf8Text(5) and Utf8Text() != gymnasium.spaces.Text(5)
    assert repr(Utf8Text()) == "Utf8Text()" and repr(Utf8Text(4)) == "Utf8Text(max_length=4)"
    assert a.to_jsonable(["a", "é"]) == ["a", "é"] and a.from_jsonable(["a"]) == ["a"]
    with pytest.raises(ValueError):
        Utf8Text(max_length=-1)


# ---------------------------------------------------------------------------------------------------------------------
# ToolCallSpace: construction, equality, catalogue updates
# ---------------------------------------------------------------------------------------------------------------------

MOVE = {"type": "object", "properties": {"steps": {"type": "integer", "minimum": 0}}, "required": ["steps"]}
WRITE = {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
         "required": ["path", "content"], "additionalProperties": False}
LIST = {"type": "object", "properties": {"items": {"type": "array", "items": {
    "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}}}
BASIC = {"move": MOVE, "write_file": WRITE, "list": LIST}


def test_repr_names_and_schemas_copy() -> None:
    space = ToolCallSpace(BASIC)
    assert repr(space) == "ToolCallSpace(3 tools: move, write_file, list)"
    assert repr(ToolCallSpace()) == "ToolCallSpace(0 tools)"
    assert repr(ToolCallSpace({"a": {}})) == "ToolCallSpace(1 tool: a)"
    assert space.tool_names == ["move", "write_file", "list"]
    schemas = space.schemas
    assert schemas == BASIC
    schemas["move"]["required"] = []
    space.tool_names.append("junk")
    assert space.schemas["move"]["required"] == ["steps"] and space.tool_names == ["move", "write_file", "list"]
    BASIC_copy = copy.deepcopy(BASIC)
    ToolCallSpace(BASIC_copy)
    assert BASIC_copy == BASIC  # the input is not mutated
    assert not space.is_np_flattenable


def test_catalogue_from_mcp_tool_list() -> None:
    class Tool:  # shaped like mcp.types.Tool
        def __init__(self, name: str, input_schema: dict[str, Any]) -> None:
            self.name, self.inputSchema = name, input_schema

    from_objects = ToolCallSpace([Tool("move", MOVE), Tool("write_file", WRITE), Tool("list", LIST)])
    from_dicts = ToolCallSpace([{"name": n, "inputSchema": s} for n, s in BASIC.items()])
    assert from_objects == from_dicts == ToolCallSpace(BASIC)
    with pytest.raises(ValueError, match="duplicate"):
        ToolCallSpace([{"name": "a", "inputSchema": {}}, {"name": "a", "inputSchema": {}}])
    untyped = ToolCallSpace({"noparams": None, "empty": {}, "true": True, "props": {"properties": {"a": {}}}}, seed=0)
    assert untyped.contains({"tool": "noparams"})
    for _ in range(20):  # untyped schemas still sample an arguments object
        action = untyped.sample()
        assert isinstance(action["arguments"], dict) and action in untyped


def test_eq() -> None:
    a = ToolCallSpace(BASIC, seed=1)
    assert a == ToolCallSpace(copy.deepcopy(BASIC), seed=2)
    assert a != ToolCallSpace({"write_file": WRITE, "move": MOVE, "list": LIST})  # order matters (masks align)
    assert a != ToolCallSpace({"move": MOVE, "write_file": WRITE})
    assert a != ToolCallSpace({**BASIC, "move": {**MOVE, "required": []}})
    assert a != ToolCallSpace(BASIC, max_argument_bytes=10)
    assert a != "ToolCallSpace" and a != Utf8Text()
    assert ToolCallSpace() == ToolCallSpace()


def test_update_changed_flag_and_effect() -> None:
    space = ToolCallSpace({"move": MOVE})
    validator = space._validators["move"]
    assert space.update({"move": copy.deepcopy(MOVE)}) is False
    assert space.update({"move": MOVE, "write_file": WRITE}) is True
    assert space._validators["move"] is validator  # unchanged schemas are not recompiled
    assert space.tool_names == ["move", "write_file"]
    assert {"tool": "write_file", "arguments": {"path": "a", "content": "b"}} in space
    assert space.update({"write_file": WRITE, "move": MOVE}) is True  # reorder counts as a change
    assert space.update({"write_file": {**WRITE, "required": ["path"]}}) is True
    assert {"tool": "write_file", "arguments": {"path": "a"}} in space
    assert {"tool": "move", "arguments": {"steps": 1}} not in space
    assert space.update(None) is True and space.tool_names == []
    assert space.update({}) is False


def test_pickle_deepcopy_and_jsonable() -> None:
    space = ToolCallSpace(CORPUS, seed=3)
    for clone in (pickle.loads(pickle.dumps(space)), copy.deepcopy(space)):
        assert clone == space
        assert clone.sample() == copy.deepcopy(space).sample()
        assert {"tool": "move", "arguments": {}} not in clone
    actions = [space.sample() for _ in range(3)]
    dumped = space.to_jsonable(actions)
    assert json.loads(json.dumps(dumped)) == actions
    dumped[0]["arguments"]["__x"] = 1
    assert "__x" not in actions[0]["arguments"]
    assert space.from_jsonable(json.loads(json.dumps(actions))) == actions


def test_gymnasium_vector_env_and_dict_space() -> None:
    class Env(gymnasium.Env):
        def __init__(self) -> None:
            self.action_space = ToolCallSpace(BASIC)
            self.observation_space = Utf8Text()

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
            super().reset(seed=seed)
            return "start", {}

        def step(self, action: Any) -> tuple[str, float, bool, bool, dict]:
            return self.action_space.validate(action) or "ok", 0.0, False, False, {}

    envs = gymnasium.vector.SyncVectorEnv([Env, Env])  # raises if the sub-env spaces do not compare equal
    envs.reset(seed=0)
    envs.action_space.seed(0)
    obs, *_ = envs.step(envs.action_space.sample())
    assert obs == ("ok", "ok")
    obs, *_ = envs.step(({"tool": "move", "arguments": {"steps": -1}}, {"tool": "nope"}))
    assert obs[0].startswith("tool 'move'") and obs[1].startswith("unknown tool 'nope'")
    d = gymnasium.spaces.Dict({"call": ToolCallSpace(BASIC), "note": Utf8Text()}, seed=1)
    assert d.sample() in d


# ---------------------------------------------------------------------------------------------------------------------
# ToolCallSpace: validation messages
# ---------------------------------------------------------------------------------------------------------------------


def err(space: ToolCallSpace, action: Any) -> ActionError:
    """The structured error, checking validate()/contains() agree with it."""
    error = space.validation_error(action)
    assert error is not None, f"{action!r} unexpectedly valid"
    assert space.validate(action) == error.message and not space.contains(action) and action not in space
    assert "\n" not in error.message and len(error.message) <= 300
    return error


def test_valid_actions() -> None:
    space = ToolCallSpace(BASIC)
    for action in [
        {"tool": "move", "arguments": {"steps": 0}},
        {"tool": "write_file", "arguments": {"path": "/tmp/ä.txt", "content": ""}},
        {"tool": "list"},  # missing arguments means {}
        {"tool": "list", "arguments": None},
        {"tool": "list", "arguments": {"items": [{"name": "a"}, {"name": "b", "extra": 1}]}},
    ]:
        assert space.validate(action) is None and space.validation_error(action) is None
        assert space.contains(action) and action in space


def test_malformed_messages() -> None:
    space = ToolCallSpace(BASIC)
    e = err(space, [("tool", "move")])
    assert e == ActionError("malformed", None, None, "action must be a dict with keys 'tool' and 'arguments', got list")
    e = err(space, {"arguments": {}})
    assert e.kind == "malformed" and "missing 'tool'" in e.message
    e = err(space, {"tool": 3, "arguments": {}})
    assert e.kind == "malformed" and "got int" in e.message
    e = err(space, {"tool": "move", "arguments": [1]})
    assert (e.kind, e.tool) == ("malformed", "move") and e.message.startswith("tool 'move':") and "list" in e.message
    e = err(space, {"tool": "move", "arguments": {"steps": 1}, "id": "c1"})
    assert e.kind == "malformed" and "'id'" in e.message


def test_unknown_tool_message() -> None:
    e = err(ToolCallSpace(BASIC), {"tool": "foo", "arguments": {}})
    assert e == ActionError("unknown_tool", "foo", None, "unknown tool 'foo' (available: move, write_file, list)")
    assert "no tools available" in err(ToolCallSpace(), {"tool": "foo"}).message
    many = ToolCallSpace({f"t{i}": {} for i in range(50)})
    assert "(+30 more)" in err(many, {"tool": "foo"}).message


def test_invalid_argument_messages() -> None:
    space = ToolCallSpace(BASIC)
    e = err(space, {"tool": "write_file", "arguments": {"content": "x"}})
    assert e == ActionError("invalid_arguments", "write_file", "path", "tool 'write_file': argument 'path' is required")
    e = err(space, {"tool": "move", "arguments": {"steps": -1}})
    assert e.message == "tool 'move': argument 'steps' = -1: -1 is less than the minimum of 0"
    assert (e.kind, e.tool, e.argument) == ("invalid_arguments", "move", "steps")
    e = err(space, {"tool": "move", "arguments": {"steps": "3"}})
    assert e.argument == "steps" and "is not of type 'integer'" in e.message
    e = err(space, {"tool": "list", "arguments": {"items": [{"name": "a"}, {"name": "b"}, {"name": 7}]}})
    assert e.argument == "items[2].name" and "argument 'items[2].name' = 7" in e.message
    e = err(space, {"tool": "list", "arguments": {"items": [{"name": "a"}, {}]}})
    assert e.message == "tool 'list': argument 'items[1].name' is required"
    e = err(space, {"tool": "write_file", "arguments": {"path": "a", "content": "b", "mode": "w"}})
    assert e.argument == "mode" and "unexpected argument 'mode'" in e.message and "allowed: path, content" in e.message
    e = err(ToolCallSpace({"f": PYDANTIC_F}), {"tool": "f", "arguments": {"path": "a", "content": "b", "n": 1,
                                                                          "tags": 5}})
    assert e.argument == "tags" and "array of string or null" in e.message
    e = err(ToolCallSpace({"f": PYDANTIC_F}), {"tool": "f", "arguments": {"path": "a", "content": "b", "n": 1,
                                                                          "mode": "c"}})
    assert e.argument == "mode" and "'c' is not one of ['a', 'b']" in e.message


def test_non_json_arguments() -> None:
    space = ToolCallSpace(BASIC)
    for bad_value, fragment in [({1, 2}, "set"), (float("nan"), "not a finite number"), (np.int64(3), "numpy.int64"),
                                (object(), "not JSON-serialisable")]:
        e = err(space, {"tool": "move", "arguments": {"steps": bad_value}})
        assert (e.kind, e.tool, e.argument) == ("invalid_arguments", "move", "steps") and fragment in e.message
    e = err(space, {"tool": "list", "arguments": {"items": [{"name": "a"}, {"name": b"x"}]}})
    assert e.argument == "items[1].name" and "bytes" in e.message
    e = err(space, {"tool": "move", "arguments": {1: 2}})
    assert e.kind == "invalid_arguments" and "str" in e.message
    loop: dict[str, Any] = {}
    loop["self"] = loop
    assert "circular" in err(space, {"tool": "list", "arguments": loop}).message


def test_too_large() -> None:
    space = ToolCallSpace(BASIC)
    e = err(space, {"tool": "write_file", "arguments": {"path": "a", "content": "x" * 1_300_000}})
    assert e == ActionError("too_large", "write_file", None,
                            "tool 'write_file': arguments are 1.3 MB of JSON, over the 1.0 MB limit")
    small = ToolCallSpace(BASIC, max_argument_bytes=100)
    e = err(small, {"tool": "write_file", "arguments": {"path": "a", "content": "x" * 200}})
    assert e.kind == "too_large" and "over the 100 bytes limit" in e.message
    # Sizes are UTF-8 bytes: with 30 x "é" the JSON is 87 bytes (177 when ASCII-escaped) and must fit in 100.
    assert small.contains({"tool": "write_file", "arguments": {"path": "a", "content": "é" * 30}})
    assert not small.contains({"tool": "write_file", "arguments": {"path": "a", "content": "é" * 60}})
    with pytest.raises(ValueError):
        ToolCallSpace(BASIC, max_argument_bytes=0)


def test_schema_dialect_from_dollar_schema() -> None:
    space = ToolCallSpace({"legacy": DRAFT4_LEGACY, "edit": ZOD_EDIT_FILE})
    assert {"tool": "legacy", "arguments": {"temp": -49.5, "unit": "c"}} in space
    e = err(space, {"tool": "legacy", "arguments": {"temp": -50, "unit": "c"}})  # draft-4 boolean exclusiveMinimum
    assert e.argument == "temp"
    assert {"tool": "legacy", "arguments": {"temp": 1, "unit": "f", "point": [1, 2]}} in space
    e = err(space, {"tool": "legacy", "arguments": {"temp": 1, "unit": "f", "point": [1, 2, 3]}})  # tuple-form items
    assert e.argument == "point"
    e = err(space, {"tool": "edit", "arguments": {"path": "a", "edits": [{"oldText": "a", "newText": "b", "x": 1}]}})
    assert e.argument == "edits[0].x"


def test_invalid_schema_warns_and_falls_back() -> None:
    with pytest.warns(UserWarning, match="tool 'broken'"):
        space = ToolCallSpace({"broken": {"type": "object", "properties": {"a": {"type": "no-such-type"}}}})
    assert {"tool": "broken", "arguments": {"a": 1}} in space
    assert err(space, {"tool": "broken", "arguments": [1]}).kind == "malformed"


# ---------------------------------------------------------------------------------------------------------------------
# ToolCallSpace: sampling
# ---------------------------------------------------------------------------------------------------------------------


def test_seed_reproducibility() -> None:
    a, b = ToolCallSpace(CORPUS, seed=42), ToolCallSpace(CORPUS, seed=42)
    first = [a.sample() for _ in range(40)]
    assert first == [b.sample() for _ in range(40)]
    other = ToolCallSpace(CORPUS, seed=43)
    assert first != [other.sample() for _ in range(40)]
    a.seed(42)
    assert [a.sample() for _ in range(40)] == first
    assert len({s["tool"] for s in first}) >= 6  # uniform over tools by default


def test_samples_are_valid_for_realistic_corpus() -> None:
    space = ToolCallSpace(CORPUS, seed=0)
    for name in space.tool_names:
        for _ in range(40):
            action = space.sample(mask={name})
            assert action["tool"] == name and action in space
            assert_valid(CORPUS[name], action["arguments"])


def test_sampled_values_look_reasonable() -> None:
    space = ToolCallSpace({"f": PYDANTIC_F}, seed=5)
    samples = [space.sample()["arguments"] for _ in range(300)]
    paths = [s["path"] for s in samples]
    assert all(1 <= len(p) <= 12 for p in paths) and len(set(paths)) > 280
    assert all(1 <= s["n"] <= 10 for s in samples) and {s["n"] for s in samples} == set(range(1, 11))
    for optional in ("tags", "mode"):  # each optional argument present about half of the time
        assert 90 < sum(optional in s for s in samples) < 210
    assert {type(s["tags"]) for s in samples if "tags" in s} == {list, type(None)}


def test_mask_by_names_and_arrays() -> None:
    space = ToolCallSpace(BASIC, seed=0)
    assert {space.sample(mask={"move", "list"})["tool"] for _ in range(50)} == {"move", "list"}
    assert {space.sample(mask=["write_file"])["tool"] for _ in range(10)} == {"write_file"}
    assert {space.sample(mask="move")["tool"] for _ in range(10)} == {"move"}
    int8 = np.array([0, 1, 1], dtype=np.int8)
    assert {space.sample(mask=int8)["tool"] for _ in range(50)} == {"write_file", "list"}
    boolean = np.array([True, False, False])
    assert {space.sample(mask=boolean)["tool"] for _ in range(10)} == {"move"}
    prob = np.array([0.0, 0.0, 1.0])
    assert {space.sample(probability=prob)["tool"] for _ in range(10)} == {"list"}
    for bad in (set(), [], np.zeros(3, dtype=np.int8), np.array([False] * 3)):
        with pytest.raises(ValueError):
            space.sample(mask=bad)
    with pytest.raises(ValueError):
        space.sample(mask={"nope"})
    with pytest.raises(ValueError):
        space.sample(mask=np.ones(2, dtype=np.int8))
    with pytest.raises(ValueError):
        space.sample(mask=np.ones(3, dtype=np.int8), probability=prob)
    with pytest.raises(ValueError):
        space.sample(probability=np.array([0.5, 0.5, 0.5]))
    with pytest.raises(ValueError):
        ToolCallSpace().sample()


def test_sample_skips_tools_it_cannot_satisfy() -> None:
    impossible = {"type": "object", "properties": {"x": {"type": "string", "pattern": "(?=a)b"}}, "required": ["x"]}
    space = ToolCallSpace({"bad": impossible, "move": MOVE}, seed=0)
    assert {space.sample()["tool"] for _ in range(20)} == {"move"}
    with pytest.raises(ValueError, match="bad"):
        space.sample(mask={"bad"})


# ---------------------------------------------------------------------------------------------------------------------
# sample_from_schema
# ---------------------------------------------------------------------------------------------------------------------


def test_sample_from_schema_corpus_first_try() -> None:
    """The generator itself (before validate-and-retry) should almost always be right on realistic schemas."""
    rng = np.random.default_rng(0)
    for name, schema in CORPUS.items():
        validator = independent_validator(schema)
        ok = sum(validator.is_valid(_Generator(schema, rng, 4).generate()) for _ in range(50))
        assert ok >= 45, f"{name}: only {ok}/50 first-try samples valid"


@pytest.mark.parametrize(
    "schema, check",
    [
        ({"type": "string", "format": "date-time"}, lambda v: v.endswith("Z") and "T" in v),
        ({"type": "string", "format": "email"}, lambda v: "@" in v),
        ({"type": "string", "format": "uri"}, lambda v: v.startswith("https://")),
        ({"type": "string", "format": "ipv4"}, lambda v: v.count(".") == 3),
        ({"type": "string", "pattern": r"^#[0-9a-fA-F]{6}$"}, lambda v: len(v) == 7),
        ({"type": "string", "pattern": r"^(foo|bar)_[0-9]+$"}, lambda v: v[:4] in ("foo_", "bar_")),
        ({"type": "string", "minLength": 20}, lambda v: len(v) >= 20),
        ({"type": "string", "maxLength": 0}, lambda v: v == ""),
        ({"type": "integer", "minimum": 10**20}, lambda v: isinstance(v, int) and v >= 10**20),
        ({"type": "integer", "exclusiveMinimum": 1.5, "exclusiveMaximum": 3}, lambda v: v == 2),
        ({"type": "integer", "minimum": 11, "maximum": 15, "multipleOf": 4}, lambda v: v == 12),
        ({"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "minimum": 0,
          "exclusiveMinimum": True, "maximum": 1}, lambda v: v == 1),
        ({"type": "number", "multipleOf": 0.1, "minimum": 0, "maximum": 1}, lambda v: 0 <= v <= 1),
        ({"type": "array", "items": {"type": "boolean"}, "uniqueItems": True, "minItems": 2},
         lambda v: sorted(v) == [False, True]),
        ({"type": "array", "contains": {"const": 7}, "items": {"type": "integer"}}, lambda v: 7 in v),
        ({"type": "object", "minProperties": 2, "additionalProperties": {"type": "integer"}},
         lambda v: len(v) >= 2 and all(isinstance(x, int) for x in v.values())),
        ({"type": "object", "patternProperties": {"^x_[a-z]+$": {"type": "integer"}}, "additionalProperties": False,
          "minProperties": 1}, lambda v: len(v) >= 1 and all(k.startswith("x_") for k in v)),
        ({"const": {"a": [1, 2]}}, lambda v: v == {"a": [1, 2]}),
        ({"enum": [None, 1, "x"]}, lambda v: v in (None, 1, "x")),
        (True, lambda v: v is None or isinstance(v, (str, int, float, bool))),
        ({}, lambda v: v is None or isinstance(v, (str, int, float, bool))),
        ({"allOf": [{"type": "integer", "minimum": 3}, {"maximum": 4}]}, lambda v: v in (3, 4)),
    ],
)
def test_sample_from_schema_cases(schema: Any, check: Any) -> None:
    rng = np.random.default_rng(1)
    for _ in range(15):
        value = sample_from_schema(schema, rng)
        assert_valid(schema, value)
        assert check(value), value
        assert_valid(schema, _Generator(schema, rng, 4).generate())  # right first time, not thanks to retries


def test_sample_from_schema_determinism_depth_and_errors() -> None:
    values = [sample_from_schema(PYDANTIC_TREE, np.random.default_rng(9)) for _ in range(2)]
    assert values[0] == values[1]

    def depth(node: dict[str, Any]) -> int:
        return 1 + max((depth(c) for c in node.get("children", [])), default=0)

    rng = np.random.default_rng(0)
    assert max(depth(sample_from_schema(PYDANTIC_TREE, rng, max_depth=4)["root"]) for _ in range(100)) <= 3
    assert all(sample_from_schema(PYDANTIC_TREE, rng, max_depth=0)["root"].keys() == {"name"} for _ in range(10))
    for impossible in (False, {"type": "integer", "minimum": 5, "maximum": 1}, {"enum": []},
                       {"type": "string", "pattern": "(?=a)b"}):
        with pytest.raises(ValueError):
            sample_from_schema(impossible, rng)


def test_pydantic_generated_schema() -> None:
    pydantic = pytest.importorskip("pydantic")
    from typing import Literal

    model = pydantic.create_model(
        "fArguments",
        path=(str, ...), content=(str, ...), tags=(list[str] | None, None), mode=(Literal["a", "b"], "a"),
        n=(int, pydantic.Field(ge=1, le=10)),
    )
    space = ToolCallSpace({"f": model.model_json_schema()}, seed=0)
    for _ in range(100):
        action = space.sample()
        assert action in space
        model.model_validate(action["arguments"])  # the server-side check agrees


# ---------------------------------------------------------------------------------------------------------------------
# hypothesis: generated schemas -> every generated value validates
# ---------------------------------------------------------------------------------------------------------------------

PATTERNS = [r"^[a-z]+$", r"^\d{3}-\d{4}$", r"^[A-Z][a-z]{2,5}$", r"abc", r"^(foo|bar)_[0-9]+$", r"^[^\s/]+$",
            r"^\S+$", r"^v\d+\.\d+\.\d+$", r"^[\w.-]+@[a-z]+\.com$", r"^.{2,4}$"]
FORMATS = ["date-time", "date", "time", "email", "uri", "uuid", "ipv4", "ipv6", "hostname"]
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-100, 100), st.text(max_size=5),
                         st.floats(-100, 100, allow_nan=False))


@st.composite
def string_schemas(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["len", "pattern", "format"]))
    if kind == "pattern":
        return {"type": "string", "pattern": draw(st.sampled_from(PATTERNS))}
    if kind == "format":
        return {"type": "string", "format": draw(st.sampled_from(FORMATS))}
    schema: dict[str, Any] = {"type": "string"}
    lo = draw(st.none() | st.integers(0, 15))
    if lo is not None:
        schema["minLength"] = lo
    if draw(st.booleans()):
        schema["maxLength"] = (lo or 0) + draw(st.integers(0, 10))
    return schema


@st.composite
def integer_schemas(draw: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    m = draw(st.sampled_from([None, 1, 2, 3, 7]))
    lo = draw(st.none() | st.integers(-10**6, 10**6))
    hi = None if not draw(st.booleans()) else (lo if lo is not None else 0) + (m or 1) - 1 + draw(st.integers(0, 50))
    if m:
        schema["multipleOf"] = m
    if lo is not None:
        schema.update({"exclusiveMinimum": lo - 1} if draw(st.booleans()) else {"minimum": lo})
    if hi is not None:
        schema.update({"exclusiveMaximum": hi + 1} if draw(st.booleans()) else {"maximum": hi})
    return schema


@st.composite
def number_schemas(draw: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "number"}
    m = draw(st.sampled_from([None, 0.5, 0.25, 2]))
    lo = draw(st.none() | st.floats(-1e6, 1e6))
    width = draw(st.floats(0.01, 1e4)) + (2 * m if m else 0)
    if m:
        schema["multipleOf"] = m
    if lo is not None:
        schema["exclusiveMinimum" if draw(st.booleans()) else "minimum"] = lo
    if draw(st.booleans()):
        schema["exclusiveMaximum" if draw(st.booleans()) else "maximum"] = (lo if lo is not None else 0.0) + width
    return schema


leaf_schemas = st.one_of(
    string_schemas(), integer_schemas(), number_schemas(),
    st.just({"type": "boolean"}), st.just({"type": "null"}), st.just({}), st.just(True),
    st.lists(json_scalars, min_size=1, max_size=4).map(lambda v: {"enum": v}),
    json_scalars.map(lambda v: {"const": v}),
)
# Item schemas with many distinct values, so uniqueItems arrays are always satisfiable.
wide_schemas = st.sampled_from([{"type": "string", "minLength": 4}, {"type": "integer"}, {"type": "number"}])
names = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)


def container_schemas(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Arrays, objects, unions and allOf over child schemas."""
    arrays = st.builds(
        lambda items, lo, extra: {"type": "array", "items": items, "minItems": lo, "maxItems": lo + extra},
        children, st.integers(0, 3), st.integers(0, 3))
    unique_arrays = st.builds(
        lambda items, lo: {"type": "array", "items": items, "uniqueItems": True, "minItems": lo, "maxItems": 5},
        wide_schemas, st.integers(0, 5))
    tuples = st.lists(children, min_size=1, max_size=3).map(
        lambda p: {"type": "array", "prefixItems": p, "items": False, "minItems": len(p)})

    @st.composite
    def objects(draw: Any) -> dict[str, Any]:
        props = draw(st.dictionaries(names, children, max_size=4))
        schema: dict[str, Any] = {"type": "object", "properties": props}
        schema["required"] = [p for p in props if draw(st.booleans())]
        additional = draw(st.sampled_from(["absent", False, True, "schema"]))
        if additional == "schema":
            schema["additionalProperties"] = draw(children)
        elif additional != "absent":
            schema["additionalProperties"] = additional
        return schema

    @st.composite
    def disjoint_one_of(draw: Any) -> dict[str, Any]:
        kinds = draw(st.lists(st.sampled_from(["string", "boolean", "null", "array", "object"]), min_size=1,
                              max_size=4, unique=True))
        return {"oneOf": [{"type": k} for k in kinds]}

    nullable = st.sampled_from(["string", "integer", "number", "boolean", "array", "object"]).map(
        lambda t: {"type": [t, "null"]})
    any_of = st.lists(children, min_size=1, max_size=3).map(lambda b: {"anyOf": b})
    all_of = st.builds(
        lambda a, b: {"allOf": [{"type": "object", "properties": {"a": a}, "required": ["a"]},
                                {"properties": {"b": b}, "required": ["b"]}]},
        children, children)
    return st.one_of(arrays, unique_arrays, tuples, objects(), disjoint_one_of(), nullable, any_of, all_of)


schemas = st.recursive(leaf_schemas, container_schemas, max_leaves=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, seed=st.integers(0, 2**32 - 1), use_defs=st.booleans())
def test_hypothesis_generated_values_validate(schema: Any, seed: int, use_defs: bool) -> None:
    if use_defs:  # the same schema reached through $ref, as pydantic emits it
        schema = {"$defs": {"Thing": schema}, "type": "object", "properties": {"thing": {"$ref": "#/$defs/Thing"}},
                  "required": ["thing"]}
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    rng = np.random.default_rng(seed)
    for _ in range(3):
        value = _Generator(schema, rng, 4).generate()  # first try, no validate-and-retry
        assert validator.is_valid(value), (value, [e.message for e in validator.iter_errors(value)])
    assert validator.is_valid(sample_from_schema(schema, rng))
    if isinstance(schema, dict) and schema.get("type") == "object":
        space = ToolCallSpace({"t": schema}, seed=seed)
        assert space.sample() in space


def test_numbers_are_finite_and_json() -> None:
    rng = np.random.default_rng(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(200):
            v = sample_from_schema({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1e-300}, rng)
            assert 0 < v < 1e-300 and math.isfinite(v)
            json.dumps(v, allow_nan=False)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None)
@given(value=json_values)
def test_size_bound_is_an_upper_bound(value: Any) -> None:
    """The cheap size bound used to skip json.dumps never underestimates the real UTF-8 size."""
    assert _json_size_bound(value) >= len(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass"))


# -- hostile patterns --------------------------------------------------------------------------------------------------
BACKTRACKING = "^(a|aa)+$"  # re.search needs ~fib(n) steps to refuse n "a" and a "!"; Python cannot interrupt it


@pytest.mark.parametrize("schema, arguments, argument", [
    ({"type": "object", "properties": {"x": {"type": "string", "pattern": BACKTRACKING}}}, {"x": "a" * 40 + "!"}, "x"),
    ({"type": "object", "patternProperties": {BACKTRACKING: {"type": "integer"}}}, {"a" * 40 + "!": 1}, None),
])
def test_a_backtracking_pattern_refuses_the_action_instead_of_hanging(schema: dict, arguments: dict,
                                                                       argument: str | None) -> None:
    space = ToolCallSpace({"t": schema})
    err = space.validation_error({"tool": "t", "arguments": arguments})
    assert err is not None and err.kind == "invalid_arguments" and err.tool == "t"
    assert "took longer than" in err.message and BACKTRACKING in err.message, err.message
    if argument is not None:
        assert err.argument == argument
    ok = {"x": "aaaa"} if argument else {"aaaa": 1}
    assert space.validation_error({"tool": "t", "arguments": ok}) is None  # a value that matches still does
    bad = {"x": "b"} if argument else {}
    if argument:
        assert "does not match" in space.validate({"tool": "t", "arguments": bad})



def test_the_memo_tables_forget_their_oldest_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_memo.keep`` bounds every memo table it fills: at its size the entry put in first goes. ``quick_check``'s
    table, cut to 2 entries, makes a third validator's check and then the first's again (forgotten), not the
    second's."""
    from mcp_gym import _memo
    from mcp_gym.spaces import _compile as compiled

    table: dict[str, int] = {}
    assert [_memo.keep(table, k, v, 2) for k, v in (("a", 1), ("b", 2), ("c", 3))] == [1, 2, 3]
    assert table == {"b": 2, "c": 3}
    monkeypatch.setattr(compiled, "_QUICK", {})
    monkeypatch.setattr(compiled, "_COMPILED_MAX", 2)
    made: list[Any] = []
    quick = compiled._quick
    monkeypatch.setattr(compiled, "_quick", lambda schema: made.append(schema["title"]) or quick(schema))
    validators = [Draft202012Validator({"type": "object", "title": t}) for t in "xyz"]
    for v in [*validators, validators[1], validators[0]]:
        assert compiled.quick_check(v)({}) is True
    assert len(compiled._QUICK) == 2 and made == ["x", "y", "z", "x"]
