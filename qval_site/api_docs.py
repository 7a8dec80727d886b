"""The API documentation page (``/api/docs/``): the OpenAPI schema that ``/api/v1/schema/`` serves
(drf-spectacular's generator), laid out as plain HTML by our own template -- no Swagger UI or
Redoc, no script, nothing fetched from another site.

The calls a researcher makes come first; the calls of the platform's remote GPU workers (:data:`WORKER_PATHS`) are
apart, at the end. Each call has its answer's fields (from the response serializers of
the apps' ``apis.py`` and :mod:`submissions.serializers`) and a ``curl`` example."""

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
WORKER_PATHS = ("/api/v1/workers/", "/api/v1/jobs/")
"""Paths of the calls only the platform's remote GPU workers make (``Authorization: Worker <key>``)."""
ROLE = re.compile(r"\s*\((?:see )?:[a-z]+:`[^`]+`\)|:[a-z]+:`~?(?:[\w.]+\.)?([^`.]+)`")
"""A Sphinx cross-reference of a docstring (``:func:`submissions.services.change_card```): in parentheses it is
dropped, elsewhere only its last name stays (the page is for the API's users, not the code's readers)."""


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
    answer: list[Field] = field(default_factory=list)
    """The fields of its successful JSON answer (``results[].metric`` for a list's items)."""
    curl: str = ""
    """A ``curl`` command line that makes the call."""

    @property
    def for_workers(self) -> bool:
        """Whether only the platform's remote workers make this call."""
        return self.path.startswith(WORKER_PATHS)

    @property
    def anchor(self) -> str:
        """The page's fragment for this operation (``get-api-v1-datasets``)."""
        slug = "".join(c if c.isalnum() else "-" for c in self.path).strip("-")
        return f"{self.method}-{slug}"


def prose(text: str) -> SafeString:
    """A description from the schema (a docstring or help text) as HTML: escaped, its wrapped lines
    joined, blank lines kept as paragraph breaks, ````literal```` and ```literal``` as code."""
    text = ROLE.sub(lambda m: m.group(1) and f"``{m.group(1)}``" or "", text)
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


def answer_fields(node: dict[str, Any], components: dict[str, Any], prefix: str = "", depth: int = 0) -> list[Field]:
    """The fields of an answer's schema, nested objects and lists of objects flattened (``card.description``,
    ``results[].metric``); a list answer's items are ``[].name``; a choice of shapes lists each one's fields."""
    node = _resolve(node, components)
    if "oneOf" in node:
        return [f for option in node["oneOf"] for f in answer_fields(option, components, prefix, depth)]
    if node.get("type") == "array":
        return answer_fields(node.get("items", {}), components, f"{prefix}[]", depth)
    fields = []
    required = set(node.get("required", ()))
    for name, prop in node.get("properties", {}).items():
        path = f"{prefix}.{name}" if prefix else name
        fields.append(Field(path, "body", type_text(prop, components), name in required,
                            prose(_description(prop, components))))
        inner = _resolve(prop, components)
        inner = _resolve(inner.get("items", {}), components) if inner.get("type") == "array" else inner
        if inner.get("properties") and depth < 2:
            fields += answer_fields(prop, components, path, depth + 1)
    return fields


CURL_BASE = "https://qval.example.org"
"""The server in the ``curl`` examples (the page replaces it with the one it is served from)."""


def curl(path: str, method: str, op: dict[str, Any], params: list[Field], body: list[Field], base: str) -> str:
    """A ``curl`` command line for the call: its required query parameters with example values, its path's
    placeholders as they are, the token header where the call takes one, a form field per required body field."""
    parts = ["curl"] + ([] if method == "get" else ["-X", method.upper()])
    if op.get("security") and {} not in op.get("security", ()):
        parts += ["-H", "'Authorization: Token $QVAL_TOKEN'"]
    elif path.startswith(WORKER_PATHS):
        parts += ["-H", "'Authorization: Worker $QVAL_WORKER_KEY'"]
    query = "&".join(f"{p.name}={p.name.upper()}" for p in params if p.where == "query" and p.required)
    for f in body:
        if f.required or f.name in ("file", "description"):
            value = "@predictions.csv" if f.name == "file" else f.name.upper()
            parts += ["-F", f"'{f.name}={value}'"]
    parts.append(f"'{base}{path}{'?' + query if query else ''}'")
    return " ".join(parts)


def operations(openapi: dict[str, Any], base: str = CURL_BASE) -> list[Operation]:
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
            ok = next((a for status, a in sorted(op.get("responses", {}).items()) if status.startswith("2")), {})
            json_answer = ok.get("content", {}).get("application/json", {}).get("schema", {})
            out.append(Operation(path, method, prose(op.get("description", "")), _authentication(op), params, body,
                                 ", ".join(content), responses, answer_fields(json_answer, components),
                                 curl(path, method, op, params, body, base)))
    return out


def docs(request: HttpRequest) -> HttpResponse:
    """The API documentation page: the researchers' calls, then the workers' apart."""
    openapi = schema()
    ops = operations(openapi, request.build_absolute_uri("/").rstrip("/"))
    return render(request, "api_docs.html", {"info": openapi.get("info", {}),
                                             "public": [o for o in ops if not o.for_workers],
                                             "workers": [o for o in ops if o.for_workers]})
