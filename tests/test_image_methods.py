"""The embedding and pre-trained image methods (vlm-rm*, vlm-sor*, vip, liv-*).

Arithmetic is checked on hand-made embeddings against values worked out by hand; the methods
run end to end on a small FrozenLake image dataset rendered by the real environment (next-state
images and trajectory_end goal images from real reference rollouts), with tiny random-weight
encoders built locally.  No Django.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from qval import schema
from qval.build import encode_png
from qval.envs.base import Snapshot
from qval.envs.frozenlake.adapter import FrozenLake, render_map
from qval.methods import encoders, goals
from qval.methods.embedding import cosine, sor_probability, sor_threshold, vlm_rm
from qval.methods.pretrained import negative_l2
from qval.methods.registry import MethodContext, MethodError, all_methods, get_method

IMAGE_METHODS = ("vlm-rm-cos", "vlm-rm", "vlm-sor-softmax", "vlm-sor", "vip", "liv-cos", "liv-l2", "liv-txt")
BACKBONE = {"vip": "resnet50:random", "liv-cos": "qval-tiny-rn:random", "liv-l2": "qval-tiny-rn:random",
            "liv-txt": "qval-tiny-rn:random"}
"""Tiny random encoders per method (the rest: ``qval-tiny-vit:random``)."""
BROKEN_STATE = "t0-s2"
"""A dev state whose images are unreadable (its V point and actor's next image): a counted NaN."""


# -- arithmetic ------------------------------------------------------------------------
def test_cosine_by_hand() -> None:
    assert cosine(np.array([[3.0, 4.0]]), np.array([1.0, 0.0]))[0] == pytest.approx(0.6)
    assert cosine(np.array([[3.0, 4.0], [0.0, -2.0]]), np.array([[4.0, 3.0], [0.0, 5.0]])) == pytest.approx([0.96, -1.0])


def test_vlm_rm_projection_by_hand() -> None:
    # x = e1, g = e2, b = e3: d = (0, 1, -1), x - g = (1, -1, 0), P(x - g) = (0, -1/2, 1/2).
    x, g, b = np.array([[5.0, 0, 0]]), np.array([0, 2.0, 0]), np.array([0, 0, 3.0])  # scale does not matter
    # alpha = 1/2: (1/2)(0, -1/2, 1/2) + (1/2)(1, -1, 0) = (1/2, -3/4, 1/4), squared norm 7/8 -> 1 - 7/16.
    assert vlm_rm(x, g, b, 0.5)[0] == pytest.approx(1 - 7 / 16)
    assert vlm_rm(x, g, b, 1.0)[0] == pytest.approx(1 - 0.5 * 0.5)  # only progress along d: |(0,-1/2,1/2)|^2 = 1/2
    assert vlm_rm(x, g, b, 0.0)[0] == pytest.approx(0.0)  # plain 1 - |x - g|^2 / 2 = cos(x, g) = 0
    rng = np.random.default_rng(0)
    xs, g2, b2 = rng.normal(size=(5, 8)), rng.normal(size=8), rng.normal(size=8)
    assert vlm_rm(xs, g2, b2, 0.0) == pytest.approx(cosine(xs, g2))


def test_vlm_sor_softmax_and_threshold_by_hand() -> None:
    x = np.array([[2.0, 0.0]])
    goal, negatives = np.array([1.0, 0.0]), np.array([[0.0, 1.0], [-3.0, 0.0], [0.0, -1.0]])
    # cosines 1, 0, -1, 0
    assert sor_probability(x, goal, negatives, 1.0)[0] == pytest.approx(math.e / (math.e + 2 + 1 / math.e))
    tau = 0.07
    expected = math.exp(1 / tau) / (math.exp(1 / tau) + 2 + math.exp(-1 / tau))
    assert sor_probability(x, goal, negatives, tau)[0] == pytest.approx(expected)
    # an image orthogonal to the goal: cosines 0, 1, 0, -1 -> goal probability 1 / (2 + e^(1/tau) + e^(-1/tau))
    away = sor_probability(np.array([[0.0, 1.0]]), goal, negatives, tau)[0]
    assert away == pytest.approx(1 / (2 + math.exp(1 / tau) + math.exp(-1 / tau)))
    assert sor_threshold(np.array([0.2, 0.5, 0.51, expected, away]), 0.5).tolist() == [0.0, 0.0, 1.0, 1.0, 0.0]


def test_negative_l2_by_hand() -> None:
    assert negative_l2(np.array([[0.0, 0.0], [1.0, 1.0]]), np.array([[3.0, 4.0], [1.0, 1.0]])).tolist() == [-5.0, 0.0]


def test_registered_with_family_targets_and_needs() -> None:
    specs = {s.name: s for s in all_methods() if s.name in IMAGE_METHODS}
    assert set(specs) == set(IMAGE_METHODS)
    assert {s.family for n, s in specs.items() if n.startswith("vlm")} == {"embedding"}
    assert {s.family for n, s in specs.items() if not n.startswith("vlm")} == {"pre-trained"}
    assert all(s.modality == "image" and s.targets == ("q", "v") for s in specs.values())
    assert specs["vip"].needs == "image-encoder" and specs["vlm-rm"].needs == "image-text-encoder"
    assert specs["vlm-rm"].params == {"alpha": 0.5}
    assert specs["vlm-sor"].params == {"tau": 0.07, "beta": 0.5}


# -- a small real image dataset ----------------------------------------------------------
def _png(env: FrozenLake) -> bytes:
    return encode_png(render_map(env.maps[env.task], env._position, size=96))


def _end_image(env: FrozenLake, snapshot: Snapshot, images: dict[str, bytes], name: str) -> str:
    """Roll the reference policy out from ``snapshot`` to the end; store the final frame as ``name``."""
    env.restore(snapshot)
    while not env.done:
        env.step(env.reference_action())
    images[name] = _png(env)
    return name


def build_image_dataset(*, goal_images: bool = True, states: int = 5) -> schema.Dataset:
    """FrozenLake 8x8 map 0: the first ``states`` states of an actor that mixes in wrong moves."""
    env = FrozenLake(map_seeds=(42,), horizon=20)
    env.reset("map-0")
    images: dict[str, bytes] = {}
    records, q_labels, v_labels = [], {}, {}
    wrong = ["move up", "move left"]
    for step in range(states):
        if env.done:
            break
        sid = f"t0-s{step}"
        here = env.snapshot()
        observation, history = env.observation(), env.history
        images[f"{sid}.png"] = _png(env)
        actor = wrong[step % 2] if step % 3 == 2 else env.reference_action()
        cands = []
        for index, action in enumerate(env.candidates()):
            cid = f"{sid}-a{index}"
            env.restore(here)
            result = env.step(action)
            images[f"{cid}-next.png"] = _png(env)
            end = _end_image(env, env.snapshot(), images, f"{cid}-end.png") if goal_images else None
            cands.append(schema.Candidate(id=cid, state_id=sid, index=index, action=action, next_state=result.observation,
                                          is_actor=action == actor, next_image=f"{cid}-next.png", end_image=end))
            q_labels[cid] = float(index)
        end = _end_image(env, here, images, f"{sid}-end.png") if goal_images else None
        records.append(schema.State(id=sid, split="dev", trajectory=0, step=step, task="map-0",
                                    observation=observation, history=history, candidates=tuple(cands),
                                    image=f"{sid}.png", end_image=end))
        v_labels[sid] = float(step)
        env.restore(here)
        env.step(actor)
    for broken in (s for s in records if s.id == BROKEN_STATE):
        images[broken.image] = b"not a png"
        images[broken.actor_candidate.next_image] = b"\x89PNG truncated"
    manifest = schema.Manifest(slug="frozenlake-img-test", name="FrozenLake images (test)", version="0",
                               environment="frozenlake", description="", modalities=["text", "image"],
                               labelling={}, config={})
    return schema.Dataset(manifest=manifest, states=records, q_labels=q_labels, v_labels=v_labels, images=images)


@pytest.fixture(scope="module")
def image_dataset() -> schema.Dataset:
    return build_image_dataset()


def _ctx(ds: schema.Dataset, target: str, backbone: str, seed: int = 0, **options) -> MethodContext:  # type: ignore[no-untyped-def]
    return MethodContext(dataset=ds, split="dev", target=target, points=ds.states_in("dev"), backbone=backbone,
                         seed=seed, options=dict(options))


def _run(name: str, ds: schema.Dataset, target: str, seed: int = 0, **options):  # type: ignore[no-untyped-def]
    goals._encoder.cache_clear()  # a fresh encoder: determinism is not the cache's doing
    return get_method(name).run(_ctx(ds, target, BACKBONE.get(name, "qval-tiny-vit:random"), seed, **options))


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "vip" else n for n in IMAGE_METHODS])
@pytest.mark.parametrize("target", ["q", "v"])
def test_end_to_end_finite_or_counted_nan_and_deterministic(name: str, target: str, image_dataset) -> None:  # type: ignore[no-untyped-def]
    progress: list[tuple[int, int]] = []
    ctx = _ctx(image_dataset, target, BACKBONE.get(name, "qval-tiny-vit:random"), batch_size=4)
    ctx.progress = lambda done, total: progress.append((done, total))
    out = get_method(name).run(ctx)
    ids = image_dataset.point_ids("dev", target)
    assert list(out.scores) == ids
    broken = BROKEN_STATE if target == "v" else f"{BROKEN_STATE}-a" + str(
        next(s for s in image_dataset.states if s.id == BROKEN_STATE).actor_candidate.index)
    nans = {k for k, v in out.scores.items() if math.isnan(v)}
    assert nans == {broken}
    assert out.num_nan == 1 and out.meta["unreadable_image"] == 1
    assert all(math.isfinite(v) for k, v in out.scores.items() if k != broken)
    assert progress == [(4, len(ids)), (len(ids), len(ids))]
    again = _run(name, image_dataset, target, batch_size=4)  # a fresh encoder, the same seed: the same numbers
    assert again.scores.keys() == out.scores.keys()
    assert all(math.isnan(a) and math.isnan(b) or a == b for a, b in zip(again.scores.values(), out.scores.values()))
    if name != "vlm-sor":  # a threshold of random similarities is mostly constant
        assert len({v for k, v in out.scores.items() if k != broken}) > 1
    assert out.meta["encoder"]["checkpoint"] == "random" and out.meta["device"] in ("cpu", "cuda")


def test_batch_size_changes_rounding_only_and_seed_changes_random_weights(image_dataset) -> None:  # type: ignore[no-untyped-def]
    a, one = _run("vlm-rm-cos", image_dataset, "v", batch_size=4), _run("vlm-rm-cos", image_dataset, "v", batch_size=1)
    finite = [k for k in a.scores if math.isfinite(a.scores[k])]
    assert [one.scores[k] for k in finite] == pytest.approx([a.scores[k] for k in finite], rel=1e-5, abs=1e-6)
    other = _run("vlm-rm-cos", image_dataset, "v", seed=1)
    assert [a.scores[k] for k in finite] != [other.scores[k] for k in finite]


def test_goal_image_methods_need_end_images() -> None:
    ds = build_image_dataset(goal_images=False, states=3)
    for name in ("vip", "liv-cos", "liv-l2"):  # refused before any encoder is loaded
        with pytest.raises(MethodError, match="no goal images"):
            _run(name, ds, "q")
    assert math.isfinite(next(iter(_run("liv-txt", ds, "q").scores.values())))  # the text goal needs none


def test_a_missing_goal_image_is_a_counted_nan(image_dataset) -> None:  # type: ignore[no-untyped-def]
    states = list(image_dataset.states)
    states[0] = schema.State(**{**states[0].__dict__, "end_image": None})
    ds = schema.Dataset(manifest=image_dataset.manifest, states=states, q_labels=image_dataset.q_labels,
                        v_labels=image_dataset.v_labels, images=image_dataset.images)
    out = _run("liv-l2", ds, "v")
    assert math.isnan(out.scores["t0-s0"]) and out.num_nan == 2 and out.meta["no_goal_image"] == 1


def test_wrong_or_missing_backbone_is_a_clear_error(image_dataset, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(MethodError, match="needs resnet50"):
        get_method("vip").run(_ctx(image_dataset, "q", "qval-tiny-vit:random"))
    with pytest.raises(MethodError, match="needs an open_clip"):
        get_method("vlm-rm").run(_ctx(image_dataset, "q", "resnet50:random"))
    monkeypatch.delenv("QVAL_ENCODER_CLIP", raising=False)
    with pytest.raises(MethodError, match="set QVAL_ENCODER_CLIP to a local ViT-L-14 checkpoint"):
        get_method("vlm-rm").run(_ctx(image_dataset, "q", "clip"))
    with pytest.raises(MethodError, match="does not exist"):
        get_method("vip").run(_ctx(image_dataset, "q", "resnet50:/nonexistent/vip.pt"))
    with pytest.raises(MethodError, match="unknown encoder architecture 'ViT-Z-99'"):
        get_method("vlm-rm").run(_ctx(image_dataset, "q", "ViT-Z-99:random"))


def test_named_encoder_loads_a_local_checkpoint_with_release_prefixes(image_dataset, tmp_path: Path,
                                                                      monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import torch

    reference = encoders.Encoder(encoders.resolve("qval-tiny-rn:random"), seed=7, device="cpu")
    path = tmp_path / "liv.pt"
    torch.save({"liv": {f"module.model.{k}": v for k, v in reference.model.state_dict().items()}}, path)
    monkeypatch.setenv("QVAL_ENCODER_LIV", str(path))
    monkeypatch.setenv("QVAL_ENCODER_LIV_MODEL", "qval-tiny-rn")
    goals._encoder.cache_clear()
    out = get_method("liv-cos").run(_ctx(image_dataset, "v", "liv", seed=0))  # seed 0: weights come from the file
    from_seed = _run("liv-cos", image_dataset, "v", seed=7)
    assert out.scores.keys() == from_seed.scores.keys()
    for k, v in out.scores.items():
        assert (math.isnan(v) and math.isnan(from_seed.scores[k])) or v == pytest.approx(from_seed.scores[k], abs=1e-6)
    described = out.meta["encoder"]
    assert described["encoder"] == "liv" and described["arch"] == "qval-tiny-rn" and len(described["checkpoint_sha256"]) == 64

    monkeypatch.setenv("QVAL_ENCODER_LIV_MODEL", "qval-tiny-vit")
    goals._encoder.cache_clear()
    with pytest.raises(encoders.EncoderError, match="does not fit the architecture"):
        get_method("liv-cos").run(_ctx(image_dataset, "v", "liv"))


def test_end_images_round_trip_and_leave_other_fingerprints_alone(image_dataset, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    written = image_dataset.write(tmp_path / "with-goals")
    back = schema.Dataset.read(written)
    assert back.states[1].end_image == "t0-s1-end.png" and back.states[1].candidates[0].end_image == "t0-s1-a0-end.png"
    assert "t0-s1-a0-end.png" in back.image_names()
    from_disk, in_memory = _run("liv-l2", back, "q"), _run("liv-l2", image_dataset, "q")  # images read from images/
    assert list(from_disk.scores) == list(in_memory.scores) and from_disk.num_nan == in_memory.num_nan == 1
    assert all(math.isnan(a) and math.isnan(b) or a == b for a, b in zip(from_disk.scores.values(), in_memory.scores.values()))
    plain = build_image_dataset(goal_images=False, states=2)
    assert all("end_image" not in line for line in _lines(plain.write(tmp_path / "plain")))


def _lines(directory: Path) -> list[str]:
    return [line for name in ("states.jsonl", "candidates.jsonl") for line in (directory / name).read_text().splitlines()]


def test_batched_preprocessing_matches_the_native_preprocessor() -> None:
    import torch
    from PIL import Image

    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, size=(120, 90, 3), dtype=np.uint8)) for _ in range(5)]
    encoder = encoders.Encoder(encoders.resolve("qval-tiny-vit:random"), seed=0, device="cpu", batch_size=2)
    native = encoder.embed_tensors(torch.stack([encoder.preprocess(im) for im in images]))
    assert encoder.encode_images(images) == pytest.approx(native, abs=1e-5)


def test_goal_texts_per_environment() -> None:
    frozen = goals.goal_texts("frozenlake")
    assert frozen.goal_for("anything") == frozen.goal and len(frozen.negatives) == 3 and frozen.baseline
    alfworld = goals.goal_texts("alfworld")
    assert alfworld.goal_for("You are in a room.\nYour task is to: put a mug in the sink.\n").endswith(
        "put a mug in the sink.")
    assert alfworld.goal_for("no objective here") is None
    assert "click the red button" in goals.goal_texts("miniwob").goal_for("Goal: click the red button\n\nRootWebArea")
    with pytest.raises(MethodError, match="no goal texts for environment 'nethack'"):
        goals.goal_texts("nethack")


def test_a_state_without_its_objective_is_an_unscored_nan(image_dataset) -> None:  # type: ignore[no-untyped-def]
    import dataclasses

    states = [dataclasses.replace(s, observation=("Your task is to: reach the gift.\n" if i % 2 else "") + s.observation)
              for i, s in enumerate(image_dataset.states)]
    manifest = dataclasses.replace(image_dataset.manifest, environment="alfworld")
    ds = schema.Dataset(manifest=manifest, states=states, q_labels=image_dataset.q_labels,
                        v_labels=image_dataset.v_labels, images=image_dataset.images)
    out = _run("vlm-sor-softmax", ds, "v")
    without = {s.id for i, s in enumerate(states) if i % 2 == 0 and s.id != BROKEN_STATE}
    assert {k for k, v in out.scores.items() if math.isnan(v)} == without | {BROKEN_STATE}
    assert out.meta["unscored"] == len(without) and out.meta["unreadable_image"] == 1
