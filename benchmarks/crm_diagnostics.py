"""Where does the membership signal of a sibling live? (CRM investigation, not a test.)

    python benchmarks/crm_diagnostics.py --adapter runs/membership-positive --out benchmarks/results/crm/diagnostics-positive.json

For every membership document it runs forwards (no generation) and cross-validates a
leakage-free probe (scaler -> PCA-8 -> LR, or CRM-LTS) on several representations:

* ``static_last`` / ``static_mean``: the document alone, last token vs mean over its tokens;
* ``raw_*``: a raw continuation prompt as in training (no chat, no template): without =
  the first 100 characters, with = document + blank line + those 100 characters;
  displacement at the last token and averaged over the shared prefix tokens;
* ``chat_*``: the CRM template A in the chat template (what ``crm eval`` uses), same;
* the token-level loss of the document (the likelihood attack) for reference.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch
from sklearn.decomposition import PCA
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from tqdm.auto import tqdm

from mnemoscope.bench.suites import membership_documents
from mnemoscope.detectors.crm import crm_pipeline
from mnemoscope.features.crm import CRMData
from mnemoscope.models import load_model
from mnemoscope.provenance import provenance
from mnemoscope.stats import auc_ci, cross_val_scores
from mnemoscope.trace.templates import PromptBuilder
from mnemoscope.trace.tracer import Capture, Tracer


def probe_auc(X: np.ndarray, y: np.ndarray) -> float:
    pipe = make_pipeline(StandardScaler(), PCA(8), LogisticRegression(max_iter=3000))
    return float(cross_val_scores(pipe, X, y, n_resamples=200).auc.estimate)


def lts_auc(disp: np.ndarray, y: np.ndarray) -> float:
    n = len(y)
    data = CRMData(tuple(map(str, range(n))), y, disp.astype(np.float32), np.zeros((n, 0)), ())
    return float(cross_val_scores(crm_pipeline(levels=("l3",)), data, y, n_resamples=200).auc.estimate)


def states(tr: Tracer, seqs: list[list[int]], n_tail: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(last-token states [n layer d], mean over each row's last n_tail tokens [n layer d])."""
    last, mean = [], []
    for i in range(0, len(seqs), 8):
        batch = seqs[i : i + 8]
        res = tr.forward(batch, hidden="all", keep_logits=0)
        assert res.hidden is not None
        h = res.hidden.float()  # [b layer seq d], left-padded
        for b, k in enumerate(n_tail[i : i + 8]):
            last.append(h[b, :, -1].numpy())
            mean.append(h[b, :, -k:].mean(1).numpy())
    return np.stack(last), np.stack(mean)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="default")
    ap.add_argument("--adapter", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    docs = membership_documents()
    y = np.array([d.label for d in docs])
    lm = load_model(args.model, adapter=args.adapter)
    tr = Tracer(lm, batch_size=8)
    tok = lm.tokenizer
    res: dict[str, object] = {"model": lm.info.to_dict(), "adapter": args.adapter, "n": len(docs)}
    layers = list(range(0, lm.info.n_layers + 1, max(1, lm.info.n_layers // 6)))
    if layers[-1] != lm.info.n_layers:
        layers.append(lm.info.n_layers)

    doc_ids = [tr.encode(d.text) for d in docs]
    s_last, s_mean = states(tr, doc_ids, [len(s) for s in doc_ids])
    stats = tr.trace(
        [d.text for d in docs], capture=Capture(hidden="none", logprobs="none", token_stats=True)
    )
    loss = np.array([-float(np.mean(t.token_logprobs)) for t in stats])
    res["loss_attack_auc"] = auc_ci(-loss, y, n_resamples=200, rng=0).estimate

    prefixes = [d.text[:100] for d in docs]
    n_q = [max(1, len(tok(p, add_special_tokens=False)["input_ids"]) - 2) for p in prefixes]
    chat = bool(lm.info.has_chat_template)
    builder = PromptBuilder(template="A", task="continuation", chat=chat)
    variants = {
        "raw": ([tr.encode(d.text + "\n\n" + p) for d, p in zip(docs, prefixes, strict=True)], [tr.encode(p) for p in prefixes]),
        "chat": (
            [tr.encode(builder.build(d.text, p, tok), chat=chat) for d, p in zip(docs, prefixes, strict=True)],
            [tr.encode(builder.build("", p, tok), chat=chat) for p in prefixes],
        ),
    }  # fmt: skip
    table: dict[str, dict[str, float]] = {}
    for name, (w, o) in tqdm(variants.items(), desc="variants"):
        # with chat, the prefix is followed by the template's tail: average over it too (same tokens)
        tail = n_q if name == "raw" else [k + 8 for k in n_q]
        wl, wm = states(tr, w, tail)
        ol, om = states(tr, o, tail)
        res[f"{name}_lts_last"] = lts_auc(wl - ol, y)
        res[f"{name}_lts_tailmean"] = lts_auc(wm - om, y)
        for layer in layers:
            row = table.setdefault(str(layer), {})
            row[f"{name}_disp_last"] = probe_auc(wl[:, layer] - ol[:, layer], y)
            row[f"{name}_disp_tailmean"] = probe_auc(wm[:, layer] - om[:, layer], y)
            row[f"{name}_without_last"] = probe_auc(ol[:, layer], y)
            row[f"{name}_without_tailmean"] = probe_auc(om[:, layer], y)
    for layer in layers:
        table[str(layer)]["static_last"] = probe_auc(s_last[:, layer], y)
        table[str(layer)]["static_mean"] = probe_auc(s_mean[:, layer], y)
    res["per_layer_probe_auc"] = table
    res["seconds"] = time.perf_counter() - t0
    with open(args.out, "w") as f:
        json.dump({**res, "provenance": provenance()}, f, indent=1, default=str)
    print(json.dumps({k: v for k, v in res.items() if k not in ("model", "per_layer_probe_auc")}, indent=1))
    for layer, row in table.items():
        print(layer, {k: round(v, 3) for k, v in row.items()})


if __name__ == "__main__":
    main()
