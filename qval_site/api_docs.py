"""The API documentation page (``/api/docs/``): the OpenAPI schema that ``/api/v1/schema/`` serves
(drf-spectacular's generator), laid out as plain HTML by our own template -- no Swagger UI or
Redoc, no script, nothing fetched from another site."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from drf_spectacular.generators import SchemaGenerator

METHODS = ("get", "post", "put", "patch", "delete")
"""The HTTP methods an operation of the schema can have, in the order the page lists them."""


@dataclass(frozen=True)
class Field:
    """One parameter or request body field: where it goes (``query``, ``path``, ``body``), its type in
    words, whether it is required, and what it means."""

    name: str
    where: str
    type: str
    required: bool
    description: SafeString = mark_safe("")


@dataclass(frozen=True)
class Response:
    """One documented answer: status code, what it means, its content types and body type."""

    status: str
    description: SafeString
    content: str
    type: str


@dataclass(frozen=True)
class Operation:
    """One path and method of the API."""

    path: str
    method: str
    description: SafeString
    authentication: str
    parameters: list[Field] = field(default_factory=list)
    body: list[Field] = field(default_factory=list)
    body_types: str = ""
    responses: list[Response] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        """The page's fragment for this operation (``get-api-v1-datasets``)."""
        slug = "".join(c if c.isalnum() else "-" for c in self.path).strip("-")
        return f"{self.method}-{slug}"


def prose(text: str) -> SafeString:
    """A description from the schema (a docstring or help text) as HTML: escaped, its wrapped lines
    joined, blank lines kept as paragraph breaks, ````literal```` and ```literal``` as code."""
    paragraphs = [" ".join(line.strip() for line in block.splitlines()) for block in re.split(r"\n\s*\n", text)]
    html = "<br><br>".join(escape(p) for p in paragraphs if p)
    return mark_safe(re.sub(r"``?([^`]+?)``?", r"<code>\1</code>", html))


@functools.lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    """The API's OpenAPI schema as ``/api/v1/schema/`` serves it (built once per process: it follows
    from the code)."""
    return SchemaGenerator().get_schema(request=None, public=True)  # type: ignore[no-any-return]


def _resolve(node: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """``node`` with a ``$ref`` (or a one-element ``allOf`` of one, drf-spectacular's way of adding a
    default) replaced by the component it names, the node's own keys kept."""
    ref = node.get("$ref")
    if ref is None and len(node.get("allOf", ())) == 1:
        ref = node["allOf"][0].get("$ref")
    if ref is None:
        return node
    target = components.get(ref.rsplit("/", 1)[-1], {})
    return {**target, **{k: v for k, v in node.items() if k not in ("$ref", "allOf")}}


def type_text(node: dict[str, Any], components: dict[str, Any]) -> str:
    """A schema's type in words: ``string (uri)``, ``one of dev, test``, ``array of integer``,
    ``object``, with ``nullable`` and the default where the schema has them."""
    node = _resolve(node, components)
    if "enum" in node:
        text = "one of " + ", ".join(str(v) for v in node["enum"] if v not in ("", None))
    elif node.get("type") == "array":
        text = "array of " + type_text(node.get("items", {}), components)
    elif "type" in node:
        text = str(node["type"]) + (f" ({node['format']})" if "format" in node else "")
    else:
        text = "any"
    if node.get("nullable"):
        text += ", nullable"
    if "default" in node and node["default"] not in ("", None):
        text += f", default {str(node['default']).lower() if isinstance(node['default'], bool) else node['default']}"
    return text


def _fields(node: dict[str, Any], where: str, components: dict[str, Any]) -> list[Field]:
    """The properties of an object schema as fields."""
    node = _resolve(node, components)
    required = set(node.get("required", ()))
    return [Field(name, where, type_text(prop, components), name in required, prose(_description(prop, components)))
            for name, prop in node.get("properties", {}).items()]


def _description(node: dict[str, Any], components: dict[str, Any]) -> str:
    """A field's own description, else its component's -- except an enumeration's, which only lists
    the values that :func:`type_text` already gives."""
    if "description" in node:
        return str(node["description"])
    resolved = _resolve(node, components)
    return "" if "enum" in resolved else str(resolved.get("description", ""))


def _authentication(op: dict[str, Any]) -> str:
    """Which credentials an operation takes, in words."""
    schemes = [name for entry in op.get("security", ()) for name in entry]
    if not schemes:
        return "none"
    words = {"tokenAuth": "API token", "cookieAuth": "signed-in session"}
    optional = "" if {} not in op.get("security", ()) else " (optional)"
    return " or ".join(words.get(s, s) for s in schemes) + optional


def operations(openapi: dict[str, Any]) -> list[Operation]:
    """Every operation of an OpenAPI document, by path then method."""
    components = openapi.get("components", {}).get("schemas", {})
    out = []
    for path, item in sorted(openapi.get("paths", {}).items()):
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            params = [Field(p["name"], p.get("in", ""), type_text(p.get("schema", {}), components),
                            bool(p.get("required")), prose(p.get("description", "")))
                      for p in [*item.get("parameters", ()), *op.get("parameters", ())]]
            content = op.get("requestBody", {}).get("content", {})  # the same fields in each content type
            body = _fields(next(iter(content.values())).get("schema", {}), "body", components) if content else []
            responses = [
                Response(status, prose(answer.get("description", "")), ", ".join(answer.get("content", {})) or "no body",
                         "; ".join(type_text(m.get("schema", {}), components)
                                   for m in answer.get("content", {}).values()))
                for status, answer in sorted(op.get("responses", {}).items())
            ]
            out.append(Operation(path, method, prose(op.get("description", "")), _authentication(op), params, body,
                                 ", ".join(content), responses))
    return out


def docs(request: HttpRequest) -> HttpResponse:
    """The API documentation page."""
    openapi = schema()
    return render(request, "api_docs.html", {"info": openapi.get("info", {}), "operations": operations(openapi)})
