"""A heuristic QVal method: the closer an action takes the agent to the goal, the higher its score.

Contract (see the runner, qval/containers.py):

* ``/input/points.jsonl``: one JSON object per point -- for target ``q`` one per candidate action
  (``id``, ``group`` = its state, ``task``, ``history``, ``state``, ``action``, ``next_state``,
  ``is_actor``, ``image``, ``next_image``), for target ``v`` one per state (``id``, ``task``,
  ``history``, ``state``, ``image``);
* ``/input/context.json``: environment, reward, spaces, discount, horizon, ``target``;
* ``/input/images/``: the image files points name;
* write ``/output/predictions.jsonl`` (``{"id": ..., "score": ...}``, one per line) and optionally
  ``/output/metadata.json``.

The container has no network, a read-only file system apart from ``/output`` and ``/tmp``, and
runs as an unprivileged user under memory, CPU, process and time limits.

The heuristic reads FrozenLake's ASCII grid (``@`` the agent, ``G`` the goal, ``H`` holes): a
state is worth ``discount ** distance`` (Manhattan distance from the agent to the goal), a step
into a hole is worth nothing; a text it cannot read scores 0.
"""

import json
import os

# The container always sees /input and /output; the variables let the same script run as a plain
# process for debugging (and for benchmarks/container_overhead.py).
INPUT = os.environ.get("QVAL_INPUT", "/input")
OUTPUT = os.environ.get("QVAL_OUTPUT", "/output")

HOLE, GOAL, AGENT = "H", "G", "@"


def grid(text):
    """The rows of the map in an observation (lines made only of map letters)."""
    return [line for line in text.splitlines() if line and set(line) <= set("SFHG@")]


def find(rows, letter):
    return next(((r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == letter), None)


def value(before, after, discount):
    """The heuristic value of being in ``after`` (having come from ``before``)."""
    rows, agent = grid(after), find(grid(after), AGENT)
    goal = find(rows, GOAL)
    if agent is None:
        return 0.0
    if goal is None:  # the agent stands on the goal
        return 1.0
    if before is not None:
        old = grid(before)
        if len(old) > agent[0] and len(old[agent[0]]) > agent[1] and old[agent[0]][agent[1]] == HOLE:
            return 0.0
    return discount ** (abs(agent[0] - goal[0]) + abs(agent[1] - goal[1]))


def main():
    with open(os.path.join(INPUT, "context.json")) as fh:
        context = json.load(fh)
    discount = context.get("discount") or 0.95
    count = 0
    with open(os.path.join(INPUT, "points.jsonl")) as points, open(os.path.join(OUTPUT, "predictions.jsonl"), "w") as out:
        for line in points:
            point = json.loads(line)
            if context["target"] == "q":
                score = value(point["state"], point["next_state"], discount)
            else:
                score = value(None, point["state"], discount)
            out.write(json.dumps({"id": point["id"], "score": score}) + "\n")
            count += 1
    with open(os.path.join(OUTPUT, "metadata.json"), "w") as fh:
        json.dump({"method": "manhattan-heuristic", "points": count}, fh)
    print(f"scored {count} points of {context['dataset']} ({context['split']}, target {context['target']})")


if __name__ == "__main__":
    main()
