"""Round 47: the whole-abstract vector scorer at the ends of float32's range, and the CoSentBert sampler's sizes."""

import itertools

import numpy as np
import pytest
import torch

from aspire.batch import DocBatch
from aspire.scoring.vector import VectorCosine


def _batch(x: torch.Tensor) -> DocBatch:
    return DocBatch(x[:, None, :], torch.ones(x.shape[0], 1, dtype=torch.bool), [f"p{i}" for i in range(x.shape[0])])


@pytest.mark.parametrize("scale", [1e20, 1e-25, 1.0])
def test_float32_vectors_far_from_one_keep_their_cosine(scale):
    q = torch.tensor([[3.0, 4.0], [1.0, 0.0], [0.0, 0.0]]) * scale  # (3, 2) float32, the last a zero vector
    c = torch.tensor([[3.0, 4.0], [-2.0, 1.0]])
    qn, cn = q.double().numpy(), c.double().numpy()
    norms = np.linalg.norm(qn, axis=1, keepdims=True)
    ref = np.where(norms > 0, qn / np.where(norms > 0, norms, 1), 0) @ (cn / np.linalg.norm(cn, axis=1, keepdims=True)).T
    got = VectorCosine().score(_batch(q), _batch(c))
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), ref, atol=1e-6)  # [[1, 0.179], [0.6, -0.894], [0, 0]]
    np.testing.assert_allclose(VectorCosine().pairwise_dist(_batch(q[:2]), _batch(c)).numpy(),
                               1 - np.diag(ref[:2]), atol=1e-6)


def test_unit_gradient_matches_float64_for_a_large_vector_and_is_zero_for_a_zero_one():
    x = (torch.tensor([[3.0, 4.0, 1.0], [0.0, 0.0, 0.0]]) * 1e20).requires_grad_()
    c = torch.tensor([[1.0, -2.0, 0.5]])
    VectorCosine().score(_batch(x), _batch(c)).sum().backward()
    x64 = (torch.tensor([[3.0, 4.0, 1.0]], dtype=torch.float64) * 1e20).requires_grad_()
    torch.nn.functional.cosine_similarity(x64, c.double()).sum().backward()
    np.testing.assert_allclose(x.grad[0].double().numpy() * 1e20, x64.grad[0].numpy() * 1e20, rtol=1e-5)
    assert torch.equal(x.grad[1], torch.zeros(3))


@pytest.fixture
def tiny_pairs():
    from datasets import Dataset
    groups = ["|".join(pair) for pair in itertools.combinations("ABCDEF", 2)]  # 15 sets
    ds = Dataset.from_dict({"anchor": [f"a{i}" for i in range(15)], "positive": [f"p{i}" for i in range(15)]})
    return ds, groups


@pytest.mark.parametrize("kw", [{"passes": 1.5}, {"passes": 2.0}, {"window": 1.5}, {"passes": True}])
def test_sampler_refuses_a_size_that_is_no_integer_naming_it(tiny_pairs, kw):
    from aspire.encoders.cosent_sampler import DistinctSetBatchSampler
    ds, groups = tiny_pairs
    with pytest.raises(ValueError, match=next(iter(kw))):
        DistinctSetBatchSampler(ds, 4, False, groups=groups, **kw)


def test_sampler_covers_every_row_once_a_pass_without_clashes(tiny_pairs):
    from aspire.encoders.cosent_sampler import DistinctSetBatchSampler
    ds, groups = tiny_pairs
    sampler = DistinctSetBatchSampler(ds, 3, False, groups=groups, window=2, passes=2, seed=5)
    batches = list(sampler)
    assert len(sampler) == len(batches)
    assert sorted(i for b in batches for i in b) == sorted(list(range(15)) * 2)
    for b in batches:
        assert len(b) <= 3
        for i, j in itertools.combinations(b, 2):
            assert groups[i] != groups[j]
    assert list(DistinctSetBatchSampler(ds, 3, False, groups=groups, window=2, passes=2, seed=5)) == batches
