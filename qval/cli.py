"""The ``qval`` command line: score locally, submit to a QVal site, follow a submission, download.

``qval evaluate FILE --dataset DIR|SLUG --split dev``   score against public labels, no server
                                                          needed for a dataset directory
``qval submit FILE --dataset SLUG --split test --target q --method NAME --description TEXT [--private]``
                                                          (a public test result needs its method card's description)
``qval status ID [--wait]``
``qval download SLUG --split dev [--format parquet|jsonl|csv|images|card|zip] [--out PATH]``
``qval run-container IMAGE --dataset DIR|SLUG --split dev [--backbone MODEL_DIR]``  run a method container (image or saved archive)
                                                          exactly as the worker does, score it on public labels

The server is ``--server``, else ``$QVAL_SERVER``, else the config file's ``server``, else
http://127.0.0.1:8000. The token is ``$QVAL_TOKEN``, else the config file's ``token``; the config
file is ``$QVAL_CONFIG`` or ``~/.config/qval/config.json``.

Start-up is kept short (``qval --help`` in about 0.1 s): pandas, requests and the scoring and
container modules are imported by the commands that use them. Waiting for a result polls the
submission every :data:`POLL_FIRST_S`, growing to at most :data:`POLL_MAX_S`, so a result is
reported well within a second of the server having it (``benchmarks/cli_latency.py``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from qval import metric_registry as rules_registry
from qval import schema

if TYPE_CHECKING:
    import requests

    from qval.scoring import MetricRow

DEFAULT_SERVER = "http://127.0.0.1:8000"
POLL_FIRST_S = 0.1
"""The first wait between two looks at a submission that is not final yet."""
POLL_MAX_S = 0.5
"""The longest wait between two looks (each wait is 1.5 times the previous one, up to this)."""


class CliError(Exception):
    """An error to print (without a traceback) before exiting with status 1."""


def _config() -> dict[str, Any]:
    path = Path(os.environ.get("QVAL_CONFIG", Path.home() / ".config" / "qval" / "config.json"))
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CliError(f"cannot read config file {path}: {exc}") from exc


def _server(args: argparse.Namespace) -> str:
    return (args.server or os.environ.get("QVAL_SERVER") or _config().get("server") or DEFAULT_SERVER).rstrip("/")


def _token(server: str) -> str:
    """The API token (``$QVAL_TOKEN``, else the config file's); without one, a :class:`CliError` naming the page of
    ``server`` where a signed-in user gets theirs."""
    token = os.environ.get("QVAL_TOKEN") or _config().get("token")
    if not token:
        raise CliError(
            "no API token: set QVAL_TOKEN or put {\"token\": \"…\"} in ~/.config/qval/config.json; "
            f"get yours, signed in, at {server}/accounts/token/"
        )
    return str(token)


def _request(method: str, url: str, **kwargs: Any) -> requests.Response:
    import requests

    try:
        resp = requests.request(method, url, timeout=kwargs.pop("timeout", 120), **kwargs)
    except requests.ConnectionError as exc:
        raise CliError(f"cannot reach the QVal server at {url.split('/api/')[0]}: is it running? ({exc.__class__.__name__})") from exc
    except requests.Timeout as exc:
        raise CliError(f"the QVal server did not answer in time ({url})") from exc
    if resp.status_code == 401:
        raise CliError("the server refused the token (401): check QVAL_TOKEN")
    if resp.status_code >= 400:
        try:
            errors = resp.json().get("errors", resp.json())
            detail = "; ".join(f"{k}: {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in errors.items())
        except (ValueError, AttributeError):
            detail = resp.text.strip()[:500]
        raise CliError(f"server answered {resp.status_code}: {detail}")
    return resp


def format_rows(rows: Sequence[MetricRow] | Sequence[dict[str, Any]]) -> str:
    """A plain-text table of metric rows (from :func:`qval.scoring.score` or the API)."""
    lines = [f"{'metric':<20} {'value':>10} {'95% CI':>19} {'p-value':>10} {'points':>7} {'dropped':>8} {'coverage':>9}"]
    withheld: dict[str, list[str]] = {}
    for row in rows:
        r = row if isinstance(row, dict) else vars(row)
        reason = (r.get("details") or {}).get("withheld")
        if reason:
            value = "withheld"
            withheld.setdefault(reason, []).append(r["metric"])
        elif r["insufficient"]:
            value = "insuff."
        elif r["value"] is None:
            value = "n/a"
        else:
            value = f"{r['value']:.4f}"
        ci = (r.get("details") or {}).get("ci95")
        ci_text = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci and None not in ci else ""
        p = f"{r['p_value']:.3g}" if r["p_value"] is not None else ""
        lines.append(
            f"{r['metric']:<20} {value:>10} {ci_text:>19} {p:>10} {r['num_points']:>7} {r['num_dropped']:>8} {r['coverage']:>9.3f}"
        )
    lines += [f"{', '.join(metrics)}: {reason}" for reason, metrics in withheld.items()]
    return "\n".join(lines)


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Score a predictions file against a public split's labels."""
    import pandas as pd

    from qval import metrics
    from qval import predictions as qpred
    from qval.scoring import score, truth_from_dataset, truth_from_frame

    if args.split not in schema.PUBLIC_SPLITS:
        raise CliError(f"split {args.split!r} has hidden labels; evaluate locally on {sorted(schema.PUBLIC_SPLITS)} or use `qval submit`")
    path = Path(args.dataset)
    if path.is_dir():
        try:
            truth = truth_from_dataset(schema.Dataset.read(path), args.split, args.target)
        except schema.SchemaError as exc:
            raise CliError(str(exc)) from exc
    else:
        url = f"{_server(args)}/api/v1/datasets/{args.dataset}/download/"
        body = _request("GET", url, params={"split": args.split, "format": "parquet"}).content
        truth = truth_from_frame(pd.read_parquet(io.BytesIO(body)), args.target)
    try:
        preds = qpred.parse(args.file, Path(args.file).name, reference_ids=truth.point_ids,
                            allow_infinite=args.rules == rules_registry.REFERENCE_RULES)
        coverage = qpred.validate(preds, truth.index)
    except qpred.ValidationFailed as exc:
        raise CliError("invalid predictions file:\n" + "\n".join(f"  - {p.message}" for p in exc.problems)) from exc
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc}") from exc
    rows = score(
        truth,
        preds.ids,
        preds.scores,
        samples=preds.samples,
        codes=preds.codes(truth.index),
        bootstrap_resamples=args.bootstrap,
        rules=args.rules,
    )
    both_signs = metrics.both_signs(truth.point_labels)  # what the site shows of this dataset (sign agreement)
    shown = {r.metric: rules_registry.shown(r.metric, both_signs) for r in rows}
    if args.json:
        print(json.dumps([{**vars(r), "shown": shown[r.metric]} for r in rows], indent=2))
    else:
        print(f"{coverage.provided} of {coverage.expected} evaluation points provided")
        print(format_rows([r for r in rows if shown[r.metric]]))
        if not all(shown.values()):
            print(rules_registry.ONE_SIGN_NOTE)
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    """Upload a predictions file and follow it until it is scored."""
    server = _server(args)
    token = _token(server)
    headers = {"Authorization": f"Token {token}"}
    data = {"dataset": args.dataset, "split": args.split, "target": args.target, "method_name": args.method,
            "backbone": args.backbone or "", "modality": args.modality,
            "description": args.description or "", "paper_url": args.paper_url or "", "code_url": args.code_url or ""}
    if args.private:  # else the split decides: a test result public, a dev self-check private
        data["public"] = "false"
    if args.open_weights is not None:
        data["open_weights"] = "true" if args.open_weights == "yes" else "false"
    try:
        with open(args.file, "rb") as fh:
            sub = _request("POST", f"{server}/api/v1/submissions/", headers=headers, data=data,
                           files={"file": (Path(args.file).name, fh)}).json()
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc}") from exc
    print(f"submission {sub['id']}: {sub['state']}", file=sys.stderr)
    if args.no_wait:
        print(sub["id"])
        return 0
    return _print_submission(follow(server, headers, sub, args.timeout))


def follow(server: str, headers: dict[str, str], sub: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Poll a submission until it is final (printing each new state to stderr); return it.

    Waits :data:`POLL_FIRST_S` between looks at first, growing by half each time up to
    :data:`POLL_MAX_S`; raises :class:`CliError` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    state, pause = sub["state"], POLL_FIRST_S
    while not sub["final"]:
        if time.monotonic() > deadline:
            raise CliError(f"submission {sub['id']} still {sub['state']} after {timeout:.0f} s; check `qval status {sub['id']}`")
        time.sleep(pause)
        pause = min(pause * 1.5, POLL_MAX_S)
        sub = _request("GET", f"{server}/api/v1/submissions/{sub['id']}/", headers=headers).json()
        if sub["state"] != state:
            state = sub["state"]
            print(f"submission {sub['id']}: {state}", file=sys.stderr)
    return sub


def _print_submission(sub: dict[str, Any]) -> int:
    print(f"submission {sub['id']} · {sub['method']} on {sub['dataset']}/{sub['split']} target {sub['target']} · {sub['state']}")
    if sub["state"] == "failed":
        print(f"error: {sub['error']}")
        for problem in sub["problems"]:
            print(f"  - {problem['message']}")
        return 1
    if sub["results"]:
        print(format_rows([r for r in sub["results"] if r.get("shown", True)]))
    if sub.get("one_sign_note"):
        print(sub["one_sign_note"])
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Print one submission (with ``--wait``: once it is final)."""
    server = _server(args)
    headers = {"Authorization": f"Token {_token(server)}"}
    sub = _request("GET", f"{server}/api/v1/submissions/{args.id}/", headers=headers).json()
    if args.wait:
        sub = follow(server, headers, sub, args.timeout)
    return _print_submission(sub)


DOWNLOAD_NAMES = {"images": "{name}-{split}-images.zip", "card": "{name}-README.md", "zip": "{name}.zip"}
"""Default output file of the non-table download formats (``card`` and ``zip``: the whole dataset)."""


def cmd_download(args: argparse.Namespace) -> int:
    """Download a dataset split (a table, or its images as a zip), the dataset card or the whole dataset."""
    resp = _request("GET", f"{_server(args)}/api/v1/datasets/{args.slug}/download/",
                    params={"split": args.split, "format": args.format})
    name = args.slug.replace("@", "-")
    default = DOWNLOAD_NAMES.get(args.format, "{name}-{split}.{format}")
    out = Path(args.out or default.format(name=name, split=args.split, format=args.format))
    out.write_bytes(resp.content)
    print(f"wrote {out} ({len(resp.content)} bytes)")
    return 0


def _version_key(version: str) -> tuple[Any, ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in version.split("."))


def remote_split(server: str, key: str, split: str) -> schema.Dataset:
    """One public split of a site's dataset (``slug`` = its latest version, or ``slug@version``) with
    its labels and images, as a :class:`schema.Dataset` holding that split only."""
    import pandas as pd

    listing = _request("GET", f"{server}/api/v1/datasets/").json()
    slug, _, version = key.partition("@")
    matches = [d for d in listing if d["slug"] == slug and (not version or d["version"] == version)]
    if not matches:
        raise CliError(f"{key!r} is neither a dataset directory nor a dataset of {server} "
                       f"(it has {', '.join(sorted(d['key'] for d in listing)) or 'none'})")
    info = max(matches, key=lambda d: _version_key(d["version"]))
    if split not in info["splits"]:
        raise CliError(f"dataset {info['key']} has no split {split!r}; choose one of {sorted(info['splits'])}")
    url = f"{server}/api/v1/datasets/{info['key']}/download/"
    frame = pd.read_parquet(io.BytesIO(_request("GET", url, params={"split": split, "format": "parquet"}).content))
    states, q_labels, v_labels = [], {}, {}
    for state_id, rows in frame.groupby("state_id", sort=False):
        first = rows.iloc[0]
        candidates = tuple(
            schema.Candidate(id=r.candidate_id, state_id=state_id, index=int(r.candidate_index), action=r.action,
                             next_state=r.next_state, is_actor=bool(r.is_actor), next_image=r.next_image or None,
                             end_image=getattr(r, "end_image", None) or None)
            for r in rows.itertuples())
        states.append(schema.State(id=state_id, split=split, trajectory=int(first.trajectory), step=int(first.step),
                                   task=first.task, observation=first.observation,
                                   history=tuple(json.loads(first.history)), candidates=candidates,
                                   image=first.image or None,
                                   end_image=getattr(first, "state_end_image", None) or None))
        q_labels.update(zip(rows.candidate_id, rows.q_label.astype(float)))
        v_labels[state_id] = float(first.v_label)
    images: dict[str, bytes] = {}
    if any((frame[c] != "").any() for c in ("image", "next_image", "end_image", "state_end_image") if c in frame):
        body = _request("GET", url, params={"split": split, "format": "images"}).content
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            images = {Path(n).name: archive.read(n) for n in archive.namelist() if not n.endswith("/")}
    return schema.Dataset(manifest=schema.Manifest(**info["manifest"]), states=states, q_labels=q_labels,
                          v_labels=v_labels, images=images)


def cmd_run_container(args: argparse.Namespace) -> int:
    """Run a method container on a public split exactly as the worker does, then score its predictions."""
    from qval import containers
    from qval.scoring import truth_from_dataset

    if args.split not in schema.PUBLIC_SPLITS:
        raise CliError(f"split {args.split!r} has hidden labels; run containers locally on {sorted(schema.PUBLIC_SPLITS)}")
    try:
        if Path(args.dataset).is_dir():
            ds = schema.Dataset.read(args.dataset)
        else:
            ds = remote_split(_server(args), args.dataset, args.split)
        truth = truth_from_dataset(ds, args.split, args.target)
        engine = containers.Engine.from_env()
        given = {"timeout_s": args.timeout, "memory_mb": args.memory, "cpus": args.cpus, "pids": args.pids}
        limits = containers.Limits(gpu=args.gpu, **{k: v for k, v in given.items() if v is not None})

        def fetch_archive(job_dir: Path) -> Path:
            if Path(args.image).is_file():
                return Path(args.image)
            archive = job_dir / "saved.tar"  # an image of the local store: saved, then loaded as an upload
            saved = engine.call("save", "-o", str(archive), args.image)
            if saved.returncode != 0:
                raise CliError(f"{args.image!r} is neither an image archive file nor an image {engine.kind} knows: "
                               f"{saved.stderr.strip()}")
            return archive

        served = None
        if args.backbone is not None:
            from qval import backbone  # torch + transformers: imported when used

            model = backbone.TransformersBackend(args.backbone)
            served = containers.ServedBackbone(model.name, model, args.token_budget)
        print(f"running {args.image} on {ds.manifest.key} {args.split} (target {args.target})", file=sys.stderr)
        result, usage = containers.run_method_container(
            engine, None, fetch_archive, lambda input_dir: containers.write_input(ds, args.split, args.target, input_dir),
            limits, served)
        if served is not None:
            print(f"backbone {served.name}: {usage['total_tokens']} of {usage['budget']} tokens in {usage['requests']}"
                  f" requests ({usage['refused']} refused)", file=sys.stderr)
    except (schema.SchemaError, containers.ContainerError, OSError) as exc:
        raise CliError(str(exc)) from exc
    evaluation = containers.evaluate(result, truth, bootstrap_resamples=args.bootstrap)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "stdout.txt").write_text(result.stdout, encoding="utf-8")
        (out / "stderr.txt").write_text(result.stderr, encoding="utf-8")
        if result.predictions is not None:
            (out / "predictions.jsonl").write_bytes(result.predictions)
        if result.metadata is not None:
            (out / "metadata.json").write_text(json.dumps(result.metadata, indent=2), encoding="utf-8")
    print(f"container {evaluation.outcome} in {result.wall_s:.1f} s", file=sys.stderr)
    if evaluation.outcome == "failed":
        for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
            if text:
                print(f"--- container {name} ---\n{text.rstrip()}", file=sys.stderr)
        raise CliError(str(evaluation.error))
    if args.json:
        print(json.dumps([vars(r) for r in evaluation.rows], indent=2))
    else:
        assert evaluation.coverage is not None
        print(f"{evaluation.coverage.provided} of {evaluation.coverage.expected} evaluation points provided")
        print(format_rows(evaluation.rows))
    return 0


def cmd_methods(args: argparse.Namespace) -> int:
    """List the built-in methods."""
    from qval.methods.registry import all_methods

    rows = [(m.name, m.family, ",".join(m.targets), m.modality, m.needs, m.description) for m in all_methods()]
    if args.json:
        print(json.dumps([dict(zip(("name", "family", "targets", "modality", "needs", "description"), r)) for r in rows],
                         indent=2, ensure_ascii=False))
        return 0
    widths = [max(len(str(r[i])) for r in rows) for i in range(5)] if rows else [0] * 5
    for r in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(r[:5], widths)) + "  " + r[5])
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    """Run a built-in method locally on a dataset split and write a predictions file."""
    from qval.methods.registry import MethodError
    from qval.methods.run import run_method, write_predictions

    try:
        if Path(args.dataset).is_dir():
            ds, ds_dir = schema.Dataset.read(args.dataset), Path(args.dataset)
        else:
            ds, ds_dir = remote_split(_server(args), args.dataset, args.split), None
        out = Path(args.out or f"{args.method}-{ds.manifest.slug}-{args.split}-{args.target}.parquet")
        cache = Path(args.cache or Path.home() / ".cache" / "qval" / "methods")

        def progress(p: Any) -> None:
            print(f"\r{args.method}: {p.done}/{p.total}", end="", file=sys.stderr, flush=True)

        options = {**({"concurrency": args.concurrency} if args.concurrency is not None else {}),
                   **({"model": args.model} if args.model else {})}
        output = run_method(args.method, ds, args.split, args.target, args.backbone, seed=args.seed, cache_dir=cache,
                            options=options, dataset_dir=ds_dir, progress=progress)
        print(file=sys.stderr)
        write_predictions(output, out)
    except (MethodError, schema.SchemaError, OSError) as exc:
        raise CliError(str(exc)) from exc
    print(f"wrote {out}: {len(output.scores)} scores, {output.num_nan} NaN "
          f"({output.meta.get('requests', 0)} requests, {output.meta.get('cache_hits', 0)} from the cache)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``qval``."""
    parser = argparse.ArgumentParser(prog="qval", description="Score and submit Q-alignment predictions.")
    parser.add_argument("--server", help=f"QVal site (default $QVAL_SERVER or {DEFAULT_SERVER})")
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser("evaluate", help="score a file locally against public labels")
    ev.add_argument("file")
    ev.add_argument("--dataset", required=True, help="dataset directory, or slug[@version] to download from the server")
    ev.add_argument("--split", default="dev")
    ev.add_argument("--target", default="q", choices=schema.TARGETS)
    ev.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for CIs (0: none)")
    ev.add_argument("--json", action="store_true", help="print the metrics as JSON")
    ev.add_argument("--rules", default=rules_registry.QVAL_RULES, choices=rules_registry.RULES,
                    help="scoring rules: ours (qval) or the QVal v1.0 reference code's (qval-v1.0)")
    ev.set_defaults(func=cmd_evaluate)

    sm = sub.add_parser("submit", help="upload a file and wait for its result")
    sm.add_argument("file")
    sm.add_argument("--dataset", required=True)
    sm.add_argument("--split", required=True, choices=schema.SPLITS)
    sm.add_argument("--target", required=True, choices=schema.TARGETS)
    sm.add_argument("--method", required=True)
    sm.add_argument("--backbone", help="the model the method uses (empty or 'none': no model)")
    sm.add_argument("--modality", default="text", choices=["text", "image"])
    card = sm.add_argument_group("method card", "shown on the boards and the result's public page; a public test-split "
                                                "result needs --description")
    card.add_argument("--description", help="what the method is and how it scores, in a sentence or two")
    card.add_argument("--paper-url", help="the paper (http(s), optional)")
    card.add_argument("--code-url", help="the code (http(s), optional)")
    card.add_argument("--open-weights", choices=["yes", "no"], help="whether the backbone's weights are open")
    card.add_argument("--private", action="store_true",
                      help="only you see the result (no board, figure or permalink); default: public on test, "
                           "private on dev")
    sm.add_argument("--no-wait", action="store_true", help="print the submission id and return")
    sm.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the result")
    sm.set_defaults(func=cmd_submit)

    st = sub.add_parser("status", help="show a submission")
    st.add_argument("id", type=int)
    st.add_argument("--wait", action="store_true", help="wait until the submission is final")
    st.add_argument("--timeout", type=float, default=600.0, help="seconds to wait with --wait")
    st.set_defaults(func=cmd_status)

    dl = sub.add_parser("download", help="download a dataset split, its images, the dataset card or the whole dataset")
    dl.add_argument("slug")
    dl.add_argument("--split", default="dev", choices=schema.SPLITS)
    dl.add_argument("--format", default="parquet", choices=["parquet", "jsonl", "csv", "images", "card", "zip"],
                    help="a split's table (parquet, jsonl, csv) or images (a zip); the dataset card (README.md) or "
                         "the whole dataset (zip: Hugging Face layout, no test labels)")
    dl.add_argument("--out")
    dl.set_defaults(func=cmd_download)

    rc = sub.add_parser("run-container", help="run a method container locally as the worker does and score it")
    rc.add_argument("image", help="a saved image archive (tar or tar.gz), or an image of the local store")
    rc.add_argument("--dataset", required=True, help="dataset directory, or slug[@version] to download from the server")
    rc.add_argument("--split", default="dev")
    rc.add_argument("--target", default="q", choices=schema.TARGETS)
    # Limits left out take qval.containers.Limits' defaults (the worker's).
    rc.add_argument("--timeout", type=float, help="wall-clock limit in seconds (default 600)")
    rc.add_argument("--memory", type=int, help="memory limit in MiB (default 2048)")
    rc.add_argument("--cpus", type=float, help="CPU limit in cores (default 1)")
    rc.add_argument("--pids", type=int, help="process limit (default 256)")
    rc.add_argument("--gpu", action="store_true", help="pass the GPUs through")
    rc.add_argument("--backbone", help="serve this local checkpoint directory on the container's backbone socket")
    rc.add_argument("--token-budget", type=int, default=2_000_000, help="the job's backbone token budget")
    rc.add_argument("--out", help="folder for the container's predictions, metadata, stdout and stderr")
    rc.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for CIs (0: none)")
    rc.add_argument("--json", action="store_true", help="print the metrics as JSON")
    rc.set_defaults(func=cmd_run_container)

    me = sub.add_parser("methods", help="list the built-in methods")
    me.add_argument("--json", action="store_true")
    me.set_defaults(func=cmd_methods)

    pr = sub.add_parser("predict", help="run a built-in method locally and write a predictions file")
    pr.add_argument("--method", required=True, help="a name `qval methods` lists")
    pr.add_argument("--backbone", required=True,
                    help="an OpenAI-compatible server (http://host:port), unix:SOCKET, or a local checkpoint directory")
    pr.add_argument("--dataset", required=True, help="dataset directory, or slug[@version] to download from the server")
    pr.add_argument("--split", default="dev")
    pr.add_argument("--target", default="q", choices=schema.TARGETS)
    pr.add_argument("--seed", type=int, default=0)
    pr.add_argument("--concurrency", type=int,
                    help="requests sent at once (default: the methods' client's, qval.methods.llm.DEFAULT_CONCURRENCY)")
    pr.add_argument("--model", help="the served model's name (default: the first the server lists)")
    pr.add_argument("--cache", help="response cache folder (default ~/.cache/qval/methods)")
    pr.add_argument("-o", "--out", help="predictions file (.parquet, .csv or .jsonl)")
    pr.set_defaults(func=cmd_predict)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``qval`` command."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"qval: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

