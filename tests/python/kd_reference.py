"""kd_reference.py: the PyTorch reference of gtrain's distillation loss (runtime/models/kd_loss.h).

A fixed batch (numpy's seeded PCG64, stored as fp32) of student and teacher logits with labels
(-100 = not trained), and for each divergence and temperature the reference value: T^2 x the sum
over the trained rows of the per-row divergence, and that sum divided by the trained-token count (the
token-weighted mean). Computed in float64 from the fp32 inputs with PyTorch's own ops, written
independently of gtrain's formulas: forward and reverse KL through F.kl_div(log_target=True), the
JSD as TRL's generalized_jsd_loss forms it (mixture by logsumexp of the weighted logs, beta 0.5),
and the sparse teacher (top-k + one tail bucket) by collapsing both distributions onto the k kept ids
and the rest.

  kd_reference.py write PATH             write the batch and references (tests/python/kd_loss_reference.json)
  kd_reference.py check TESTS COMMITTED  recompute them, require the committed file to hold the same
                                         inputs and values (1e-12), then run the gtest KdLoss.*Reference*
                                         of the TESTS executable on the fresh file (GTRAIN_KD_REFERENCE)
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

N, V, K = 12, 37, 5
TEMPERATURES = [1.0, 2.0]
KINDS = ["forward_kl", "reverse_kl", "jsd"]


def batch():
    rng = np.random.default_rng(51)
    student = (rng.standard_normal((N, V)) * 2.0).astype(np.float32)
    teacher = (rng.standard_normal((N, V)) * 3.0).astype(np.float32)
    labels = rng.integers(0, V, size=N)
    labels[[1, 4, 5, 9]] = -100  # prompt tokens: not trained
    return student, teacher, labels


def divergence(log_t, log_s, kind):
    """Per-row divergence over the last dim; log_t, log_s float64 [n, m]."""
    if kind == "forward_kl":  # KL(p_t || p_s)
        return F.kl_div(log_s, log_t, reduction="none", log_target=True).sum(-1)
    if kind == "reverse_kl":  # KL(p_s || p_t)
        return F.kl_div(log_t, log_s, reduction="none", log_target=True).sum(-1)
    beta = torch.tensor(0.5, dtype=torch.float64)  # TRL's generalized JSD at beta 0.5
    log_m = torch.logsumexp(torch.stack([log_s + torch.log(1 - beta), log_t + torch.log(beta)]), dim=0)
    kl_t = F.kl_div(log_m, log_t, reduction="none", log_target=True).sum(-1)
    kl_s = F.kl_div(log_m, log_s, reduction="none", log_target=True).sum(-1)
    return beta * kl_t + (1 - beta) * kl_s


def buckets(log_t, log_s, k):
    """Both distributions collapsed onto the teacher's top-k ids and one tail bucket."""
    ids = log_t.topk(k, dim=-1).indices
    rest = torch.ones_like(log_t, dtype=torch.bool).scatter(1, ids, False)
    tail_t = torch.logsumexp(log_t.masked_fill(~rest, -math.inf), dim=-1, keepdim=True)
    tail_s = torch.logsumexp(log_s.masked_fill(~rest, -math.inf), dim=-1, keepdim=True)
    return torch.cat([log_t.gather(1, ids), tail_t], 1), torch.cat([log_s.gather(1, ids), tail_s], 1)


def references(student, teacher, labels):
    s = torch.from_numpy(student).double()
    t = torch.from_numpy(teacher).double()
    trained = torch.from_numpy(labels) != -100
    cases = []
    for sparse in (False, True):
        for temperature in TEMPERATURES:
            for kind in KINDS:
                log_s = F.log_softmax(s[trained] / temperature, dim=-1)
                log_t = F.log_softmax(t[trained] / temperature, dim=-1)
                if sparse:
                    log_t, log_s = buckets(log_t, log_s, K)
                total = float(divergence(log_t, log_s, kind).sum()) * temperature**2
                cases.append({"kind": kind, "temperature": temperature, "sparse": sparse, "sum": total,
                              "mean": total / int(trained.sum())})
    return cases


def document():
    student, teacher, labels = batch()
    return {"n": N, "vocab": V, "k": K, "student": [float(x) for x in student.reshape(-1)],
            "teacher": [float(x) for x in teacher.reshape(-1)], "labels": [int(x) for x in labels],
            "cases": references(student, teacher, labels)}


def same(a, b):
    if a["student"] != b["student"] or a["teacher"] != b["teacher"] or a["labels"] != b["labels"]:
        return "the inputs differ"
    for x, y in zip(a["cases"], b["cases"]):
        if abs(x["sum"] - y["sum"]) > 1e-12 * max(1.0, abs(y["sum"])):
            return f"{x['kind']} T={x['temperature']} sparse={x['sparse']}: {x['sum']!r} vs {y['sum']!r}"
    return None


def main(argv):
    if len(argv) == 2 and argv[0] == "write":
        with open(argv[1], "w") as f:
            json.dump(document(), f, indent=1)
            f.write("\n")
        return 0
    if len(argv) != 3 or argv[0] != "check":
        print(__doc__)
        return 2
    fresh = document()
    with open(argv[2]) as f:
        problem = same(fresh, json.load(f))
    if problem:
        print(f"{argv[2]} is not what this torch computes ({torch.__version__}): {problem}; "
              f"rewrite it with kd_reference.py write")
        return 1
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "kd_reference.json")
        with open(path, "w") as f:
            json.dump(fresh, f)
        env = dict(os.environ, GTRAIN_KD_REFERENCE=path)
        return subprocess.run([argv[1], "--gtest_filter=KdLoss.*Reference*"], env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
