"""A QVal method that asks the platform's backbone whether an action is good.

It needs a backbone: submit it with ``backbone`` set to a model the platform serves (or run it
with ``qval run-container ... --backbone DIR``).  The platform then mounts an OpenAI-compatible
model server as a Unix socket; ``QVAL_BACKBONE_SOCKET`` holds its path and ``QVAL_BACKBONE_MODEL``
the model's name.  The container still has no network: the socket is the only way out.

For each point the method sends one chat request with ``max_tokens=1``, ``temperature=0`` and
``top_logprobs=20``, and scores it ``log p(Yes) - log p(No)`` for the first answer token (a
word missing from the top 20 gets the lowest logprob listed).  Target ``q`` asks about the
state and the candidate action, target ``v`` about the state alone.

Every job has a token budget.  When the server answers 429 (``token_budget_exceeded``) the
method stops asking and scores the remaining points 0, so the job still ends with predictions;
the count is written to ``/output/metadata.json``.
"""

import http.client
import json
import os
import socket

INPUT = os.environ.get("QVAL_INPUT", "/input")
OUTPUT = os.environ.get("QVAL_OUTPUT", "/output")
SOCKET = os.environ.get("QVAL_BACKBONE_SOCKET", "")
MODEL = os.environ.get("QVAL_BACKBONE_MODEL", "")


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over the backbone's Unix socket."""

    def __init__(self, path):
        super().__init__("localhost", timeout=600)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(600)
        self.sock.connect(self.path)


class BudgetExhausted(Exception):
    pass


def ask(conn, messages):
    """The chat completion's first token logprobs; raises BudgetExhausted on HTTP 429."""
    body = {"model": MODEL, "messages": messages, "max_tokens": 1, "temperature": 0,
            "logprobs": True, "top_logprobs": 20}
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    payload = json.loads(resp.read())
    if resp.status == 429:
        raise BudgetExhausted(payload["error"]["message"])
    if resp.status != 200:
        raise RuntimeError(f"backbone status {resp.status}: {payload}")
    content = payload["choices"][0]["logprobs"]["content"]
    return content[0]["top_logprobs"] if content else []


def yes_minus_no(top):
    """log p(Yes) - log p(No) from the top alternatives of the first token."""
    floor = min((t["logprob"] for t in top), default=-100.0)
    best = {"yes": floor, "no": floor}
    for t in top:
        word = t["token"].strip().lower()
        if word in best:
            best[word] = max(best[word], t["logprob"])
    return best["yes"] - best["no"]


def question(context, point):
    intro = (f"Environment: {context.get('name')}. {context.get('reward') or ''}\n"
             f"Task: {point['task']}\nActions so far: {', '.join(point['history']) or 'none'}\n"
             f"Current state:\n{point['state']}\n")
    if context["target"] == "q":
        ask_text = f"Proposed action: {point['action']}\nIs this action a good step towards the goal? Answer Yes or No."
    else:
        ask_text = "Will the agent reach the goal from this state? Answer Yes or No."
    return [{"role": "system", "content": "You judge the actions of an agent. Answer with one word."},
            {"role": "user", "content": intro + ask_text}]


def main():
    if not SOCKET:
        raise SystemExit("no backbone: submit this method with a backbone (QVAL_BACKBONE_SOCKET is not set)")
    with open(os.path.join(INPUT, "context.json")) as fh:
        context = json.load(fh)
    conn = UnixHTTPConnection(SOCKET)
    asked = unscored = 0
    exhausted = None
    with open(os.path.join(INPUT, "points.jsonl")) as points, open(os.path.join(OUTPUT, "predictions.jsonl"), "w") as out:
        for line in points:
            point = json.loads(line)
            score = 0.0
            if exhausted is None:
                try:
                    score = yes_minus_no(ask(conn, question(context, point)))
                    asked += 1
                except BudgetExhausted as exc:
                    exhausted = str(exc)
            if exhausted is not None:
                unscored += 1
            out.write(json.dumps({"id": point["id"], "score": score}) + "\n")
    with open(os.path.join(OUTPUT, "metadata.json"), "w") as fh:
        json.dump({"method": "backbone-yes-no", "model": MODEL, "asked": asked, "unscored_after_budget": unscored,
                   "budget_message": exhausted}, fh)
    print(f"asked the backbone about {asked} points; {unscored} scored 0 after the token budget ran out")


if __name__ == "__main__":
    main()
