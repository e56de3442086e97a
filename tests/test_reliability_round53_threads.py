"""Round 53 (lead): compiled (numba) OT code called from several threads at once, as the search server's worker
threads call it under concurrent requests. numba's workqueue threading layer (the one it runs on where TBB and its
OpenMP layer are not usable, as in a long test process here) aborted the whole process ("Concurrent access has been
detected"); `aspire.scoring._newton.torch_thread_count` now runs one compiled block at a time."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from aspire.paths import REPO

SCRIPT = textwrap.dedent("""
    import threading
    import torch
    from aspire.scoring import gathered_ot_match
    from aspire.scoring.sinkhorn import sinkhorn

    torch.manual_seed(0)
    B, N = 64, 8
    cost = torch.rand(B, N, N)
    a, b = torch.full((B, N), 1 / N), torch.full((B, N), 1 / N)
    pool = torch.randn(40, 16)
    rows = torch.randint(0, 40, (2, B, N))
    alone = sinkhorn(cost, a, b, 0.05).value
    scored = gathered_ot_match(pool, rows[0], pool, rows[1]).dist
    wrong = []

    def run():
        for _ in range(60):  # the Sinkhorn kernel (iterations, plans) and the gathered cost kernel, each parallel
            if not torch.equal(sinkhorn(cost, a, b, 0.05).value, alone):
                wrong.append("sinkhorn")
            if not torch.equal(gathered_ot_match(pool, rows[0], pool, rows[1]).dist, scored):
                wrong.append("gathered")

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("answers that differ from one thread's:", len(wrong))
""")


def test_compiled_ot_from_four_threads_at_once_on_numba_workqueue_layer():
    env = {**os.environ, "NUMBA_THREADING_LAYER": "workqueue", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert "Concurrent access has been detected" not in done.stderr
    assert done.returncode == 0, done.stderr[-2000:]
    assert "answers that differ from one thread's: 0" in done.stdout
