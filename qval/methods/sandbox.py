"""Generated code (codegen, eureka) runs here: only inside a podman sandbox container, never in the worker.

:func:`validate` checks a generated ``signal_function`` before anything runs it: one
top-level function with exactly the expected positional arguments, imports only of
:data:`ALLOWED_MODULES`, no dunder attribute access.  :func:`run_functions` runs validated
sources on a list of inputs in one container of :mod:`qval.containers` (no network, read-only
root, unprivileged user, memory/CPU/pids/wall-clock limits) from the project's base image
(``QVAL_SANDBOX_IMAGE``, default ``localhost/qval-base:py3-slim``, built by
``scripts/build-base-image.sh``).  Inside, a runner forks one child per function; the function
sees restricted builtins (no ``open``, ``eval``, ``exec``, ``__import__`` beyond the allowed
modules) and every call has its own time limit (``SIGALRM``); a child that outlives its whole
budget is killed.  A failing, slow or non-finite call gives NaN.  Django-free.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Sequence

from qval import containers

ALLOWED_MODULES: tuple[str, ...] = ("collections", "itertools", "json", "math", "re", "statistics", "string")
DEFAULT_IMAGE = "localhost/qval-base:py3-slim"

_RUNNER = r'''
import builtins, json, math, os, select, signal, sys, time
ALLOWED = set(sys.argv[1].split(","))
SAFE = {n: getattr(builtins, n) for n in (
    "abs all any bool chr dict divmod enumerate filter float frozenset int isinstance issubclass iter len list map "
    "max min next ord pow range repr reversed round set slice sorted str sum tuple zip hasattr callable "
    "Exception ValueError TypeError KeyError IndexError ZeroDivisionError ArithmeticError AttributeError "
    "StopIteration RuntimeError True False None").split()}
SAFE["__build_class__"] = builtins.__build_class__
def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level or name.split(".")[0] not in ALLOWED:
        raise ImportError(f"import of {name} is not allowed")
    return __import__(name, globals, locals, fromlist, level)
SAFE["__import__"] = guarded_import
class CallTimeout(BaseException):
    pass
def on_alarm(signum, frame):
    raise CallTimeout()
job = json.load(open("/input/job.json"))
inputs, limit = job["inputs"], float(job["call_timeout_s"])
out = open("/output/predictions.jsonl", "w")
for index, source in enumerate(job["functions"]):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        signal.signal(signal.SIGALRM, on_alarm)
        scores = []
        try:
            space = {"__builtins__": SAFE, "__name__": "generated"}
            exec(compile(source, "<signal_function>", "exec"), space)
            fn = space["signal_function"]
        except BaseException:
            fn = None
        for args in inputs:
            value = None
            if fn is not None:
                try:
                    signal.setitimer(signal.ITIMER_REAL, limit)
                    result = fn(*args)
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    if isinstance(result, tuple) and result:
                        result = result[0]
                    value = float(result)
                    if not math.isfinite(value):
                        value = None
                except BaseException:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    value = None
            scores.append(value)
        with os.fdopen(w, "w") as pipe:
            pipe.write(json.dumps(scores))
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + limit * max(1, len(inputs)) + 5
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            data = b""
            break
        ready, _, _ = select.select([r], [], [], left)
        if ready:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    try:
        scores = json.loads(data)
    except ValueError:
        scores = [None] * len(inputs)
    out.write(json.dumps({"function": index, "scores": scores}) + "\n")
    out.flush()
'''


def extract_code(reply: str) -> str | None:
    """The last fenced code block of a reply (``python`` or untagged), or None."""
    blocks = re.findall(r"```(?:python|py)?[ \t]*\n(.*?)```", reply, flags=re.S)
    return blocks[-1].strip("\n") if blocks else None


def validate(source: str, arity: int) -> str | None:
    """Why ``source`` is not an acceptable ``signal_function`` taking ``arity`` arguments, or None when it is."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return f"syntax error: {exc.msg} (line {exc.lineno})"
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if [f.name for f in functions] != ["signal_function"]:
        return "expected exactly one top-level function, named signal_function"
    other = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.Import, ast.ImportFrom, ast.Expr))]
    if other:
        return f"only imports and the function may be at top level, found {type(other[0]).__name__} (line {other[0].lineno})"
    args = functions[0].args
    if (len(args.args) != arity or args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs
            or len(args.defaults) > 0):
        return f"signal_function must take exactly {arity} positional arguments"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if not node.level else ["."]
        else:
            names = []
        bad = [n for n in names if n.split(".")[0] not in ALLOWED_MODULES]
        if bad:
            return f"import of {bad[0]!r} is not allowed (allowed: {', '.join(ALLOWED_MODULES)})"
        if isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            return f"access to the attribute {node.attr!r} is not allowed (line {node.lineno})"
    return None


def _base_archive(engine: containers.Engine, image: str) -> Path:
    """The sandbox image saved as an archive (once per image id), for loading into a job's own store."""
    found = engine.call("image", "inspect", "--format", "{{.Id}}", image)
    if found.returncode != 0:
        raise containers.ContainerError(f"the sandbox image {image} is missing: build it with scripts/build-base-image.sh "
                                        f"({found.stderr.strip()})")
    image_id = found.stdout.strip().removeprefix("sha256:")
    folder = Path(tempfile.gettempdir()) / "qval-sandbox"
    folder.mkdir(exist_ok=True)
    archive = folder / f"{image_id}.tar"
    if not archive.is_file():
        tmp = folder / f".{image_id}.{os.getpid()}.tar"
        saved = engine.call("save", "-o", str(tmp), image)
        if saved.returncode != 0:
            raise containers.ContainerError(f"cannot save the sandbox image {image}: {saved.stderr.strip()}")
        tmp.replace(archive)
    return archive


def run_functions(sources: Sequence[str], inputs: Sequence[Sequence[str]], *, call_timeout_s: float = 2.0,
                  engine: containers.Engine | None = None, image: str | None = None,
                  memory_mb: int = 512) -> list[list[float]]:
    """Each source's ``signal_function(*args)`` for every ``args`` of ``inputs``, run in one sandbox container.

    Sources must have passed :func:`validate`.  Returns one list of scores per source (NaN where a
    call failed, timed out or returned a non-finite value; all NaN when the container failed).
    """
    if not sources:
        return []
    engine = engine or containers.Engine.from_env()
    image = image or os.environ.get("QVAL_SANDBOX_IMAGE", DEFAULT_IMAGE)
    nan_rows = [[math.nan] * len(inputs) for _ in sources]
    wall = len(sources) * (call_timeout_s * max(1, len(inputs)) + 10) + 30
    with containers.Job(engine) as job:
        image_id = job.load(_base_archive(engine, image))
        (job.input_dir / "runner.py").write_text(_RUNNER, encoding="utf-8")
        (job.input_dir / "job.json").write_text(json.dumps(
            {"functions": list(sources), "inputs": [list(a) for a in inputs], "call_timeout_s": call_timeout_s}),
            encoding="utf-8")
        limits = containers.Limits(timeout_s=wall, memory_mb=memory_mb, cpus=1.0, pids=64, output_mb=64, tmp_mb=16)
        result = job.run(image_id, limits, command=("python3", "-I", "/input/runner.py", ",".join(ALLOWED_MODULES)))
    if result.predictions is None:
        return nan_rows
    for line in result.predictions.decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
            row = [math.nan if v is None else float(v) for v in rec["scores"]]
            if len(row) == len(inputs):
                nan_rows[int(rec["function"])] = row
        except (ValueError, KeyError, TypeError, IndexError):
            continue
    return nan_rows
