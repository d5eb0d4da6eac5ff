# SPDX-License-Identifier: Apache-2.0
"""Pydantic models generated from a JSON Schema of the contract in ../proto (the plan's,
proto/hotpath/v1/plan.schema.json): `python -m app.protocol.schema_gen SCHEMA OUT.py`, run by `make proto`.

Only the part of JSON Schema the contract uses is understood, and anything else is refused rather than
dropped: `$defs` of objects (each a model; `additionalProperties: true` keeps unknown members) and of
scalars (each an Annotated alias); `type` string/integer/number/boolean/array; `enum` of strings;
`pattern`, `minLength`, `maxLength`, `minimum`, `maximum`, `maxItems`; `required`; `default` (the
model's, left out of the JSON Schema pydantic writes: see _may_be_absent); `$ref` to a `$def`;
`description`. A property that is not required and has no default is `X | None = None`. A property
whose name is a Python keyword gets a trailing underscore and the JSON name as its alias. Models are
strict, as JSON Schema is: "yes" is not a boolean, "5" is not an integer.
docs/decisions.md says why this is a small script rather than datamodel-code-generator.
"""

import json
import keyword
import pathlib
import sys
from typing import Any

_SCALAR_KEYS = {"type", "description", "pattern", "minLength", "maxLength", "minimum", "maximum", "enum", "default"}
_OBJECT_KEYS = {"type", "description", "additionalProperties", "required", "properties"}
_PROPERTY_KEYS = _SCALAR_KEYS | {"$ref", "items", "maxItems"}
_CONSTRAINTS = {
    "pattern": "pattern",
    "minLength": "min_length",
    "maxLength": "max_length",
    "minimum": "ge",
    "maximum": "le",
    "maxItems": "max_length",
}
_PY = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}


class SchemaError(ValueError):
    """The schema uses something this generator does not understand."""


def _only(where: str, node: dict[str, Any], allowed: set[str]) -> None:
    extra = set(node) - allowed
    if extra:
        raise SchemaError(f"{where}: {', '.join(sorted(extra))} not understood")


def _ref(where: str, ref: str) -> str:
    if not ref.startswith("#/$defs/"):
        raise SchemaError(f"{where}: only #/$defs/ references are understood, not {ref}")
    return ref.removeprefix("#/$defs/")


def _field_args(node: dict[str, Any]) -> list[str]:
    return [f"{_CONSTRAINTS[k]}={node[k]!r}" for k in _CONSTRAINTS if k in node]


def _type(where: str, node: dict[str, Any]) -> tuple[str, list[str]]:
    """The Python type of a property or scalar $def and its Field constraints."""
    if "$ref" in node:
        return _ref(where, node["$ref"]), []
    if "enum" in node:
        if not all(isinstance(v, str) for v in node["enum"]):
            raise SchemaError(f"{where}: only enums of strings are understood")
        return "Literal[" + ", ".join(repr(v) for v in node["enum"]) + "]", []
    kind = node.get("type")
    if kind == "array":
        inner, args = _type(where + "[]", node["items"])
        if args:
            inner = f"Annotated[{inner}, Field({', '.join(args)})]"
        return f"list[{inner}]", [f"max_length={node['maxItems']!r}"] if "maxItems" in node else []
    if kind not in _PY:
        raise SchemaError(f"{where}: type {kind!r} not understood")
    return _PY[kind], _field_args(node)


def generate(schema: dict[str, Any], source: str) -> str:
    """The Python module of the schema's $defs, in their order (a model may name one defined later)."""
    out = [
        "# SPDX-License-Identifier: Apache-2.0",
        f"# Generated from {source} by app/protocol/schema_gen.py (make -C backend proto).",
        "# Do not edit: change the schema.",
        "# ruff: noqa: E501",
        "from __future__ import annotations",
        "",
        "from typing import Annotated, Literal",
        "",
        "from pydantic import BaseModel, ConfigDict, Field",
        "",
        "",
        "def _may_be_absent(schema: dict) -> None:",
        '    """A default is what the backend reads for a missing member; the stored JSON (what the API',
        '    returns) may lack it, so the OpenAPI document names no default (a client must not rely on it)."""',
        '    schema.pop("default", None)',
        "",
    ]
    for name, node in schema["$defs"].items():
        if node.get("type") != "object":
            _only(name, node, _SCALAR_KEYS)
            kind, args = _type(name, node)
            desc = [f"description={node['description']!r}"] if "description" in node else []
            out.append(f"{name} = Annotated[{kind}, Field({', '.join(args + desc)})]")
            continue
        _only(name, node, _OBJECT_KEYS)
        extra = "allow" if node.get("additionalProperties", True) is True else "forbid"
        out += ["", "", f"class {name}(BaseModel):"]
        if "description" in node:
            out.append(f"    {json.dumps(node['description'], ensure_ascii=False)}")
        out.append(f"    model_config = ConfigDict(extra={extra!r}, populate_by_name=True, strict=True)")
        required = set(node.get("required", []))
        for prop, sub in node.get("properties", {}).items():
            where = f"{name}.{prop}"
            _only(where, sub, _PROPERTY_KEYS)
            kind, args = _type(where, sub)
            attr = prop + "_" if keyword.iskeyword(prop) else prop
            if attr != prop:
                args.append(f"alias={prop!r}")
            if "description" in sub:
                args.append(f"description={sub['description']!r}")
            if prop not in required:
                if "default" in sub:
                    args.insert(0, repr(sub["default"]) if sub["default"] != [] else "default_factory=list")
                    args.append("json_schema_extra=_may_be_absent")
                else:
                    kind += " | None"
                    args.insert(0, "None")
            out.append(f"    {attr}: {kind} = Field({', '.join(args)})" if args else f"    {attr}: {kind}")
        if set(required) - set(node.get("properties", {})):
            raise SchemaError(f"{name}: requires a member it does not describe")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m app.protocol.schema_gen SCHEMA.json OUT.py", file=sys.stderr)
        return 2
    schema_path, out = pathlib.Path(argv[1]), pathlib.Path(argv[2])
    text = generate(json.loads(schema_path.read_text()), "proto/" + schema_path.as_posix().split("proto/", 1)[-1])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
