"""Per-sequence sampler chains built from `protocol.SamplingParams` (llama.cpp's sampler API).

One chain per sequence: penalties, mirostat and the RNG keep state. The chain is created off the context
thread (constructors only read the vocab) and then used only by the thread that owns the context. Order
follows llama.cpp's common sampler: logit bias, penalties, then the truncation samplers, temperature, and the
final pick (dist / greedy / mirostat). A grammar is never in the chain: constrained.py keeps it apart and
feeds it only tokens it accepts (as common_sampler does).
"""
from __future__ import annotations

import math

from llama_cpp import llama_cpp as L

from app.engine.protocol import SamplingParams

DEFAULT_SEED = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED: llama.cpp picks a random seed


class SamplingError(ValueError):
    """Sampling parameters out of range; the message names the parameter."""


def validate(p: SamplingParams, n_vocab: int) -> None:
    def bad(name, why):
        raise SamplingError(f"invalid sampling option {name}: {why}")

    for name in ("temperature", "top_p", "min_p", "typical_p", "repeat_penalty", "presence_penalty",
                 "frequency_penalty", "mirostat_tau", "mirostat_eta"):
        v = getattr(p, name)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            bad(name, f"must be a finite number, got {v!r}")
    if p.temperature < 0:
        bad("temperature", "must be >= 0")
    if p.repeat_penalty <= 0:
        bad("repeat_penalty", "must be > 0 (1.0 = off)")
    if not 0 <= p.top_p <= 1:
        bad("top_p", "must be in [0, 1]")
    if not 0 <= p.min_p <= 1:
        bad("min_p", "must be in [0, 1]")
    if not 0 < p.typical_p <= 1:
        bad("typical_p", "must be in (0, 1]")
    if not isinstance(p.top_k, int) or p.top_k < 0:
        bad("top_k", "must be an integer >= 0")
    if not isinstance(p.repeat_last_n, int) or p.repeat_last_n < -1:
        bad("repeat_last_n", "must be an integer >= -1")
    if p.mirostat not in (0, 1, 2):
        bad("mirostat", "must be 0, 1 or 2")
    if p.seed is not None and (not isinstance(p.seed, int) or p.seed < 0):
        bad("seed", "must be a non-negative integer")
    for tok, bias in (p.logit_bias or {}).items():
        if not isinstance(tok, int) or not 0 <= tok < n_vocab:
            bad("logit_bias", f"token id {tok!r} outside the vocabulary (0..{n_vocab - 1})")
        if not isinstance(bias, (int, float)) or math.isnan(bias):
            bad("logit_bias", f"bias for token {tok} must be a number")


def penalty_window(p: SamplingParams, n_ctx: int = 0) -> int:
    """How many recent tokens the repeat/presence/frequency penalties look at (repeat_last_n; -1 = the context)."""
    return p.repeat_last_n if p.repeat_last_n != -1 else max(n_ctx, 64)


def build_chain(p: SamplingParams, n_vocab: int, n_ctx: int = 0) -> int:
    """Returns a llama_sampler* (an int handle); free it with `free_chain`."""
    validate(p, n_vocab)
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    try:
        seed = DEFAULT_SEED if p.seed is None else (p.seed & 0xFFFFFFFF)
        add = lambda s: L.llama_sampler_chain_add(chain, s)  # noqa: E731  (the chain owns what it is given)
        if p.logit_bias:
            arr = (L.llama_logit_bias * len(p.logit_bias))()
            for i, (tok, bias) in enumerate(p.logit_bias.items()):
                # llama_cpp annotates Structure fields with their ctypes types; ctypes takes Python numbers
                arr[i].token, arr[i].bias = int(tok), max(-1e30, min(1e30, float(bias)))  # type: ignore[assignment]
            add(L.llama_sampler_init_logit_bias(n_vocab, len(p.logit_bias), arr))
        last_n = penalty_window(p, n_ctx)
        if last_n and (p.repeat_penalty != 1.0 or p.presence_penalty or p.frequency_penalty):
            add(L.llama_sampler_init_penalties(n_vocab, last_n, p.repeat_penalty, p.frequency_penalty, p.presence_penalty))
        if p.temperature <= 0:
            add(L.llama_sampler_init_greedy())
        elif p.mirostat == 1:
            add(L.llama_sampler_init_temp(p.temperature))
            add(L.llama_sampler_init_mirostat(n_vocab, seed, p.mirostat_tau, p.mirostat_eta, 100))
        elif p.mirostat == 2:
            add(L.llama_sampler_init_temp(p.temperature))
            add(L.llama_sampler_init_mirostat_v2(seed, p.mirostat_tau, p.mirostat_eta))
        else:
            if p.top_k > 0:
                add(L.llama_sampler_init_top_k(p.top_k))
            if p.typical_p < 1.0:
                add(L.llama_sampler_init_typical(p.typical_p, 1))
            if p.top_p < 1.0:
                add(L.llama_sampler_init_top_p(p.top_p, 1))
            if p.min_p > 0.0:
                add(L.llama_sampler_init_min_p(p.min_p, 1))
            add(L.llama_sampler_init_temp(p.temperature))
            add(L.llama_sampler_init_dist(seed))
    except BaseException:
        L.llama_sampler_free(chain)
        raise
    return chain


def grammar_sampler(vocab, gbnf: str):
    """A (non-lazy) grammar sampler for GBNF text with root `root`; SamplingError when llama.cpp cannot parse it
    (its parser catches its own exceptions and returns NULL)."""
    g = L.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
    if not g:
        raise SamplingError("the grammar could not be parsed by llama.cpp")
    return g


def free_grammar(g) -> None:
    if g:
        L.llama_sampler_free(g)


def accept_prompt(chain, tokens, window: int) -> int:
    """Feed the prompt's last `window` tokens to the chain's penalties sampler; returns how many were fed.

    llama-server does the same when a slot starts (`init_sampler`: common_sampler_accept(.., is_generated=false)
    for every prompt token), and so does Ollama, so that a repeat penalty also covers what the prompt said.
    Only the penalties sampler sees them: the grammar sampler must see generated tokens only (a prompt token
    would advance or break its parse), and no other sampler in our chains keeps per-token state.
    """
    if not chain or window <= 0 or len(tokens) == 0:
        return 0
    penalties = None
    for i in range(L.llama_sampler_chain_n(chain)):
        s = L.llama_sampler_chain_get(chain, i)
        if L.llama_sampler_name(s) == b"penalties":     # a neutral one is named "?penalties" and keeps nothing
            penalties = s
            break
    if penalties is None:
        return 0
    tail = tokens[-window:]
    for t in tail:
        L.llama_sampler_accept(penalties, int(t))
    return len(tail)


def free_chain(chain) -> None:
    if chain:
        L.llama_sampler_free(chain)
