"""Which features carry a sibling's membership signal, and which do not? (CRM investigation.)

    python benchmarks/crm_signal_probe.py --adapter runs/membership-strong \
        --out benchmarks/results/crm/signal-strong.json

Complements ``crm_diagnostics.py`` (hidden-state probes at the query's last token and
averaged over its tokens, raw and chat prompts: all near chance on the positive sibling).
Forwards only, one document at a time, for every membership document:

* **the document alone**: the loss attack split by position (the first 100 characters, which
  CRM's continuation query repeats, vs the rest); the logit-lens loss of the actual next
  tokens at several layers (where along depth the memorised text becomes predictable);
  target-free confidence of the final layer (mean entropy, mean max log-prob: the next
  token's identity is not used); leakage-free probes (scaler -> LR at full width, and
  scaler -> PCA-8 -> LR as in ``crm_diagnostics.py``) on the mean hidden state over the
  document's tokens;
* **CRM's question**: the NLL of the document's true continuation (characters 100:) after the
  query, without and with the document as context, in CRM's prompt (chat template, template
  A, "Continue the following passage: <first 100 characters>") and in the raw training format
  (the first 100 characters, continued; with context = document + blank line + them).

Unsupervised scores are oriented so that higher = member (lower NLL, lower entropy); AUCs
with 95% stratified-bootstrap CIs.
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
from mnemoscope.data.records import DEFAULT_QUERY_CHARS
from mnemoscope.models import load_model
from mnemoscope.models.arch import get_module
from mnemoscope.provenance import provenance
from mnemoscope.stats import auc_ci, cross_val_scores
from mnemoscope.trace.templates import PromptBuilder


def auc(score: np.ndarray, y: np.ndarray) -> list[float | None]:
    e = auc_ci(score, y, n_resamples=500, rng=0)
    return [e.estimate, e.ci_low, e.ci_high]


def probe(X: np.ndarray, y: np.ndarray, pca: bool) -> list[float | None]:
    steps = [StandardScaler()] + ([PCA(8)] if pca else []) + [LogisticRegression(C=0.1, max_iter=5000)]
    e = cross_val_scores(make_pipeline(*steps), X, y, n_resamples=500).auc
    return [e.estimate, e.ci_low, e.ci_high]


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="default")
    ap.add_argument("--adapter", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--per-class", type=int, default=None, help="first N members and non-members (smoke runs)"
    )
    ap.add_argument("--lens-layers", default="5,10,15,20,25,30")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    docs = membership_documents()
    if args.per_class:
        docs = [d for k in (1, 0) for d in [d for d in docs if d.label == k][: args.per_class]]
    y = np.array([d.label for d in docs])
    lm = load_model(args.model, adapter=args.adapter)
    model, tok = lm.model, lm.tokenizer
    n_layers = lm.info.n_layers
    lens_layers = [int(x) for x in args.lens_layers.split(",") if int(x) <= n_layers]
    norm = get_module(model, lm.arch.final_norm) if lm.arch and lm.arch.final_norm else None
    head = model.get_output_embeddings()

    def run(ids: list[int]) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        out = model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
        return out.logits[0].float().log_softmax(-1), out.hidden_states

    def nll_of(ids_prompt: list[int], ids_answer: list[int]) -> float:
        k = len(ids_answer)  # only the logits that predict the answer (the LM head dominates the cost)
        out = model(input_ids=torch.tensor([ids_prompt + ids_answer]), use_cache=False, logits_to_keep=k + 1)
        lp = out.logits[0, -(k + 1) : -1].float().log_softmax(-1)
        return float(-lp.gather(1, torch.tensor(ids_answer)[:, None]).mean())

    chat = bool(lm.info.has_chat_template)
    builder = PromptBuilder(template="A", task="continuation", chat=chat)
    feats: dict[str, list[float]] = {}
    lens_nll: list[list[float]] = []
    static_mean: list[np.ndarray] = []
    for d in tqdm(docs, desc="documents"):
        enc = tok(d.text, return_offsets_mapping=True)  # special tokens as the tracer adds them
        ids = list(enc["input_ids"])
        starts = np.array([s for s, _ in enc["offset_mapping"]])
        lp, hs = run(ids)
        tgt = torch.tensor(ids[1:])
        tok_lp = lp[:-1].gather(1, tgt[:, None])[:, 0].numpy()  # log p of token i+1, i = 0..n-2
        in_prefix = starts[1:] < DEFAULT_QUERY_CHARS
        feats.setdefault("loss_all", []).append(float(-tok_lp.mean()))
        feats.setdefault("loss_prefix", []).append(float(-tok_lp[in_prefix].mean()))
        feats.setdefault("loss_rest", []).append(float(-tok_lp[~in_prefix].mean()))
        p = lp[:-1].exp()
        feats.setdefault("entropy", []).append(float(-(p * lp[:-1]).sum(-1).mean()))
        feats.setdefault("max_logprob", []).append(float(lp[:-1].max(-1).values.mean()))
        row = []
        for layer in lens_layers:
            h = hs[layer][0, :-1]
            if layer < n_layers and norm is not None:
                h = norm(h)
            llp = head(h).float().log_softmax(-1)
            row.append(float(-llp.gather(1, tgt[:, None]).mean()))
        lens_nll.append(row)
        static_mean.append(torch.stack([x[0].mean(0) for x in hs]).float().numpy())

        # CRM's question: the true continuation after the query, without / with the document
        prefix, rest = d.text[:DEFAULT_QUERY_CHARS], d.text[DEFAULT_QUERY_CHARS:]
        ans = list(tok(rest, add_special_tokens=False)["input_ids"])
        w_chat = list(tok(builder.build(d.text, prefix, tok), add_special_tokens=not chat)["input_ids"])
        o_chat = list(tok(builder.build("", prefix, tok), add_special_tokens=not chat)["input_ids"])
        feats.setdefault("chat_nll_without", []).append(nll_of(o_chat, ans))
        feats.setdefault("chat_nll_with", []).append(nll_of(w_chat, ans))
        o_raw = list(tok(prefix)["input_ids"])
        w_raw = list(tok(d.text + "\n\n" + prefix)["input_ids"])
        feats.setdefault("raw_nll_without", []).append(nll_of(o_raw, ans))
        feats.setdefault("raw_nll_with", []).append(nll_of(w_raw, ans))

    F = {k: np.array(v) for k, v in feats.items()}
    res: dict[str, object] = {"model": lm.info.to_dict(), "adapter": args.adapter, "n": len(docs)}
    res["unsupervised_auc"] = {
        "loss_all": auc(-F["loss_all"], y),
        "loss_prefix_first100chars": auc(-F["loss_prefix"], y),
        "loss_rest": auc(-F["loss_rest"], y),
        "entropy_final (target-free)": auc(-F["entropy"], y),
        "max_logprob_final (target-free)": auc(F["max_logprob"], y),
        "chat_nll_without (continuation | CRM prompt, no context)": auc(-F["chat_nll_without"], y),
        "chat_nll_with (continuation | CRM prompt, with context)": auc(-F["chat_nll_with"], y),
        "chat_gap (nll_without - nll_with, smaller = member)": auc(-(F["chat_nll_without"] - F["chat_nll_with"]), y),
        "raw_nll_without (continuation | prefix)": auc(-F["raw_nll_without"], y),
        "raw_nll_with (continuation | document + prefix)": auc(-F["raw_nll_with"], y),
        "raw_gap (nll_without - nll_with, smaller = member)": auc(-(F["raw_nll_without"] - F["raw_nll_with"]), y),
    }  # fmt: skip
    res["means_member_vs_non_member"] = {
        k: [float(v[y == 1].mean()), float(v[y == 0].mean())] for k, v in F.items()
    }
    L = np.array(lens_nll)
    res["logit_lens_loss_auc"] = {str(layer): auc(-L[:, i], y) for i, layer in enumerate(lens_layers)}
    S = np.stack(static_mean)  # [n layer d]
    res["static_mean_probe_auc"] = {
        str(layer): {"full_lr": probe(S[:, layer], y, pca=False), "pca8_lr": probe(S[:, layer], y, pca=True)}
        for layer in lens_layers
    }
    res["seconds"] = time.perf_counter() - t0
    with open(args.out, "w") as f:
        json.dump({**res, "provenance": provenance()}, f, indent=1, default=str)
    print(json.dumps({k: v for k, v in res.items() if k != "model"}, indent=1))


if __name__ == "__main__":
    main()
