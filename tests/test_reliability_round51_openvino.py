"""Round 51: the OpenVINO backend (`OpenVinoTransformer`) under threads sharing one encoder, and its inference
paths (empty batch, one text, mixed lengths) against the exact torch model, on a tiny random BERT."""

from __future__ import annotations

import threading

import pytest
import torch

from aspire.encoders import load_encoder

pytest.importorskip("openvino")

TEXTS = [["a model", "we propose a new method for the document similarity of scientific text"],
         ["data", "two new methods improve performance on text", "the results"],
         ["citation data is noisy", "fig 2"],
         ["the paper shows results on scientific text based on citation data and more"]]


@pytest.fixture(scope="module")
def exact(tiny_model_dir, cache):
    return load_encoder(tiny_model_dir)


@pytest.fixture(scope="module")
def ov2(tiny_model_dir, cache):
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        return load_encoder(tiny_model_dir, backend="openvino")  # two single-thread streams
    finally:
        torch.set_num_threads(threads)


def hidden(encoder, texts):
    enc = encoder.tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        return encoder.model(**enc).last_hidden_state


def test_threads_sharing_one_openvino_encoder_get_their_own_results(ov2):
    assert len(ov2.model.queue) == 2
    alone = [hidden(ov2, texts) for texts in TEXTS]
    got: dict[int, list] = {i: [] for i in range(len(TEXTS))}
    errors: list[BaseException] = []
    start = threading.Barrier(len(TEXTS))

    def work(i):
        try:
            start.wait()
            for _ in range(25):
                got[i].append(hidden(ov2, TEXTS[i]))
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(TEXTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, outs in got.items():
        assert len(outs) == 25
        for out in outs:  # the same texts alone: the same groups, the same kernels, the same numbers
            assert torch.equal(out, alone[i]), f"thread {i} got another thread's (or a mixed) result"


def test_openvino_matches_the_exact_model_on_empty_one_and_mixed_batches(exact, ov2):
    empty = {name: torch.zeros(0, 3, dtype=torch.long) for name in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.inference_mode():  # no rows (the torch model itself cannot reshape 0 rows): nothing run
        assert ov2.model(**empty).last_hidden_state.shape == (0, 3, exact.model.config.hidden_size)
    for texts in (["one text only"], TEXTS[1], TEXTS[0] + TEXTS[3] + ["x"]):
        enc = exact.tokenizer(texts, padding=True, return_tensors="pt")
        with torch.inference_mode():
            want = exact.model(**enc).last_hidden_state
            got = ov2.model(**enc).last_hidden_state
        assert got.shape == want.shape and got.dtype == torch.float32
        mask = enc["attention_mask"].bool()
        torch.testing.assert_close(got[mask], want[mask], atol=1e-4, rtol=1e-4)
        assert not got[~mask].any()  # padding comes back as zeros
