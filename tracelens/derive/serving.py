"""Serving frameworks' per-step annotations: how much attention work each forward did.

vLLM, SGLang and ATOM wrap each model forward in a `record_function` whose name carries
the step's batch: how many prefill ("context") and decode ("generation") requests, and
for attention's cost, which grows with Σ N_Q² and Σ N_Q·N_KV rather than with tokens,
those sums over the requests (N_Q: a request's new tokens, N_KV: its keys and values,
cached plus new). Spellings seen (TraceLens documents the same, TraceUtils/
annotation_utils.py):

- SGLang: `step[DECODE bs=64 g_sq=64 g_sk=100032 g_sqsq=64 g_sqsk=100032]`,
  `step[EXTEND bs=1 toks=1025 c_sqsq=1050625 c_sqsk=1050625 c_sk=1025]`,
  `step[MIXED bs=66 c=2 g=64 c_sq=.. c_sk=.. c_sqsq=.. c_sqsk=.. g_sq=.. g_sk=.. g_sqsq=.. g_sqsk=..]`
  (c_ for the prefill requests, g_ for the decode ones; plain `step[DECODE bs=64]` has no sums);
- vLLM: `execute_<tokens>_context_<n>(sq..sk..sqsq..sqsk..)_generation_<m>(sq..sk..sqsq..sqsk..)`
  (detailed), `execute_context_<n>(<tokens>)_generation_<m>(<tokens>)` (plain), and the
  2026 variant `execute_context_<n>(<tokens>_<Σ N_Q²>)_generation_<m>(<tokens>)`;
- ATOM: `prefill[bs=2 tok=14721 ... sqsq=.. sqsk=.. sk=..]`, `decode[bs=32 tok=128 ... sqsq=..]`
  (`bs=117/128`: 117 real requests padded to the 128 a CUDA graph was captured for).

A prefill request with nothing cached attends to itself: its Σ N_Q·N_KV is its Σ N_Q²
(with a causal mask, half of that is computed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Framework = Literal["sglang", "vllm", "atom"]
Phase = Literal["prefill", "decode", "mixed", "idle"]

_SGLANG = re.compile(r"^step\[(EXTEND|DECODE|MIXED|IDLE)\b([^\]]*)\]")
_VLLM_DETAILED = re.compile(
    r"^execute_(\d+)_context_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)_generation_(\d+)\(sq(\d+)sk(\d+)sqsq(\d+)sqsk(\d+)\)"
)
_VLLM_PLAIN = re.compile(r"^execute_context_(\d+)\((\d+)(?:_(\d+))?\)_generation_(\d+)\((\d+)(?:_(\d+))?\)")
_ATOM = re.compile(r"^(prefill|decode)\[(.*)\]$")
_KV = re.compile(r"(\w+)=(\d+)(?:/(\d+))?")


@dataclass(frozen=True)
class StepSizes:
    """One serving step's batch and attention sizes (0 where the annotation has none)."""

    framework: Framework
    phase: Phase
    context_requests: int
    generation_requests: int
    c_sq: int  # Σ N_Q over prefill requests (their new tokens)
    c_sk: int  # Σ N_KV
    c_sqsq: int  # Σ N_Q²
    c_sqsk: int  # Σ N_Q·N_KV
    g_sq: int
    g_sk: int
    g_sqsq: int
    g_sqsk: int
    has_sizes: bool  # the sums are there (a detailed annotation)
    padded_batch: int  # the batch the CUDA graph was captured for, when the annotation says (ATOM)

    @property
    def tokens(self) -> int:
        return self.c_sq + self.g_sq

    @property
    def sum_qk(self) -> int:
        """Σ N_Q·N_KV over all requests: the attention's multiply-adds per head and dim."""
        return self.c_sqsk + self.g_sqsk

    @property
    def sum_kv(self) -> int:
        """Σ N_KV: the keys and values attention reads."""
        return self.c_sk + self.g_sk

    @property
    def graph_batch(self) -> int | None:
        """The batch size to find this step's CUDA graph by (SGLang and ATOM capture one
        per decode batch size, vLLM per padded token count)."""
        if self.padded_batch:
            return self.padded_batch
        if self.phase == "decode":
            return self.generation_requests or self.g_sq or None
        return self.tokens or None


def _i(d: dict[str, str], k: str) -> int:
    v = d.get(k, "0")
    return int(v) if v.isdigit() else 0


def parse_step(name: str) -> StepSizes | None:
    """The sizes of a serving step annotation, or None for any other range name."""
    if name.startswith("step["):
        m = _SGLANG.match(name)
        if not m:
            return None
        mode, body = m.group(1), m.group(2)
        kv = {k: v for k, v, _ in _KV.findall(body)}
        bs = _i(kv, "bs")
        has = "g_sqsq" in kv or "c_sqsq" in kv
        c_sq, g_sq = _i(kv, "c_sq"), _i(kv, "g_sq")
        if mode == "DECODE":
            cr, gr = 0, bs
            g_sq = g_sq or bs
        elif mode == "EXTEND":
            cr, gr = bs, 0
            c_sq = c_sq or _i(kv, "toks")
        else:
            cr, gr = _i(kv, "c"), _i(kv, "g")
        phase: Phase = {"DECODE": "decode", "EXTEND": "prefill", "MIXED": "mixed", "IDLE": "idle"}[mode]  # type: ignore[assignment]
        return StepSizes("sglang", phase, cr, gr, c_sq, _i(kv, "c_sk"), _i(kv, "c_sqsq"), _i(kv, "c_sqsk"), g_sq,
                         _i(kv, "g_sk"), _i(kv, "g_sqsq"), _i(kv, "g_sqsk"), has, 0)  # fmt: skip
    if name.startswith("execute_"):
        m = _VLLM_DETAILED.match(name)
        if m:
            v = [int(x) for x in m.groups()]
            cr, gr = v[1], v[6]
            return StepSizes("vllm", _phase(cr, gr), cr, gr, v[2], v[3], v[4], v[5], v[7], v[8], v[9], v[10], True, 0)
        m = _VLLM_PLAIN.match(name)
        if m:
            cr, ctok, csq2, gr, gtok, gsq2 = (int(x) if x else 0 for x in m.groups())
            # The 2026 variant adds Σ N_Q² of the prefill requests: with no prefix cache
            # their N_KV is their N_Q, so Σ N_Q·N_KV is the same sum. Decode: N_Q = 1.
            has = bool(m.group(3)) and (gr == 0 or bool(m.group(6)))
            return StepSizes("vllm", _phase(cr, gr), cr, gr, ctok, ctok if has else 0, csq2, csq2, gtok, 0,
                             gsq2 or gtok, 0, has, 0)  # fmt: skip
        return None
    m = _ATOM.match(name)
    if m:
        kind, body = m.group(1), m.group(2)
        found = _KV.findall(body)
        kv = {k: v for k, v, _ in found}
        padded = next((int(p) for k, _, p in found if k == "bs" and p), 0)
        bs, tok = _i(kv, "bs"), _i(kv, "tok")
        has = "sqsq" in kv and "sqsk" in kv
        if kind == "prefill":
            return StepSizes("atom", "prefill", bs, 0, tok, _i(kv, "sk"), _i(kv, "sqsq"), _i(kv, "sqsk"), 0, 0, 0, 0,
                             has, padded)  # fmt: skip
        return StepSizes("atom", "decode", 0, bs, 0, 0, 0, 0, tok, _i(kv, "sk"), _i(kv, "sqsq"), _i(kv, "sqsk"), has,
                         padded)  # fmt: skip
    return None


def _phase(context: int, generation: int) -> Phase:
    if context and generation:
        return "mixed"
    if context:
        return "prefill"
    return "decode" if generation else "idle"
