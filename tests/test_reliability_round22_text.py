"""Round 22, text layer: citation-marker cleaning on ACL-style contexts (title-case name particles, "et. al",
"2002a,b"), checked on the real co-citation records (the hand-made cases are in tests/test_cocite.py's
`test_clean_citations`)."""

from __future__ import annotations

import json
import re

from aspire.data.cocite.text import clean_citations


def test_clean_citations_on_real_cocitation_contexts_leaves_no_name_particle_and_keeps_the_words(shared_data):
    """Over the 2,600 real contexts: no "De [CIT]" / "Di [CIT]" left (there were 5); nothing but markers is
    removed: the words outside parentheses and brackets are kept, in order."""
    path = shared_data / "cocite-acl" / "cocitations.jsonl"
    contexts = [json.loads(line)["context"] for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(contexts) == 2600
    particles, checked = [], 0
    for text in contexts:
        out = clean_citations(text)
        if re.search(r"\b(?:De|Di|Van|Von) \[CIT\]", out):
            particles.append(out)
        # every word of the text outside any bracket or parenthesis, less the "and" / names / years a
        # narrative citation takes, survives: check the lower-case words of 4+ letters, in order (on texts
        # whose brackets pair up, unnested: a PDF's mixed columns put a sentence inside an open parenthesis)
        if re.search(r"[()\[\]]", re.sub(r"\([^()\[\]]*\)|\[[^()\[\]]*\]", "", text)):
            continue
        checked += 1
        words = [w for w in re.findall(r"(?<!\S)[a-z]{4,}\b", re.sub(r"\([^()]*\)|\[[^\[\]]*\]", "|", text))]
        kept = re.findall(r"(?<!\S)[a-z]{4,}\b", out.replace("[CIT]", " "))
        it = iter(kept)
        assert all(w in it for w in words), (text, out)
    assert checked > 2000
    assert particles == []


def test_alignment_matches_a_brute_force_loop_on_padded_batches():
    """`cc_align` / `abs_align` against a loop over python cosines: ragged papers (1-4 sentences, padded in the
    batch), a repeated abstract (its tie goes to the earliest sentence), one-sentence papers."""
    import torch

    from aspire.batch import DocBatch
    from aspire.data.align import TIE_TOLERANCE, abs_align, cc_align

    def cos(a, b):
        return float(torch.nn.functional.cosine_similarity(a, b, dim=0))

    def first_best(scored):  # [(score, key), ...] in order -> key of the first within tolerance of the best
        best = max(s for s, _ in scored)
        return next(k for s, k in scored if s >= best - TIE_TOLERANCE)

    g = torch.Generator().manual_seed(0)
    for _trial in range(40):
        sizes = torch.randint(1, 5, (3, 3), generator=g).tolist()
        qs = [torch.randn(n, 4, generator=g) for n in sizes[0]]
        ps = [torch.randn(n, 4, generator=g) for n in sizes[1]]
        cs = [torch.randn(min(n, 3), 4, generator=g) for n in sizes[2]]
        qs[0] = torch.cat([qs[0], qs[0]])  # every sentence twice: the first copy must win
        qi, qsim = cc_align(DocBatch.from_list(qs), DocBatch.from_list(cs))
        pair, _ = abs_align(DocBatch.from_list(qs), DocBatch.from_list(ps))
        for k in range(3):
            scores = [max(cos(s, c) for c in cs[k]) for s in qs[k]]
            i = first_best([(s, i) for i, s in enumerate(scores)])
            assert int(qi[k]) == i and abs(float(qsim[k]) - scores[i]) < 1e-5
            assert tuple(pair[k].tolist()) == first_best(
                [(cos(a, b), (i, j)) for i, a in enumerate(qs[k]) for j, b in enumerate(ps[k])])
        assert int(qi[0]) < len(qs[0]) // 2
