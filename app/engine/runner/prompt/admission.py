"""Request admission, on the runner's output thread: validate the request, render the chat template, tokenize,
fit the prompt to the context (context_fit.py: refuse, drop the oldest messages, or cut a raw prompt, as the
request says, and count what went), build the grammar and the sampler chain, and set up the output state.

The context thread never waits on this work: a sequence reaches the `ready` queue only once its prompt tokens
and sampler chain exist (docs/architecture.md, "Runner").

The model's chat facts (app/engine/gguf/chat_facts, read by the parent and passed at load: the runner never reads
them) give the template (the GGUF's, or a built-in one chosen from the vocabulary when it has none, with that
family's end-of-turn stops). The request's plan (app/engine/chat/plan.py, made by the service) names the family,
whose marker tokens a reply shows as text for the service's parser, and the tool-call grammar, built here as
it says (docs/architecture.md, "Tool calls").
"""
from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
from llama_cpp import llama_cpp as L

from app.engine.chat.formats import GENERIC, format_for
from app.engine.chat.plan import ChatPlan
from app.engine.gguf.chat_facts import ChatFacts
from app.engine.protocol import has_images
from app.engine.runner.cache.explain import PromptHistory
from app.engine.runner.cache.stores import common_prefix
from app.engine.runner.embedding.embeddings import tokenize
from app.engine.runner.output.text import MAX_TOP_LOGPROBS, Detokenizer, StopBytes, StopMatcher, Vocab
from app.engine.runner.prompt import chat_template, context_fit
from app.engine.runner.prompt.prefix_tokens import PrefixTokens
from app.engine.runner.sampling import answer_hold, chain as sampling, grammar, think_budget, tool_grammar
from app.engine.runner.sampling.constrained import SeqSampler
from app.engine.runner.sampling.greedy import greedy_pick
from app.engine.runner.sequence import N_KEEP, Seq
from app.engine.runner.speculation.prompt_views import PromptViews

log = logging.getLogger("strata.engine")


def validate(req) -> None:
    """The request fields the runner itself relies on (the service validates the rest); ValueError names them."""
    if not isinstance(req.num_predict, int) or isinstance(req.num_predict, bool):
        raise ValueError("num_predict must be an integer")
    if not isinstance(req.top_logprobs, int) or not 0 <= req.top_logprobs <= MAX_TOP_LOGPROBS:
        raise ValueError(f"top_logprobs must be an integer in 0..{MAX_TOP_LOGPROBS}")
    if not isinstance(req.stop, list) or not all(isinstance(s, str) for s in req.stop):
        raise ValueError("stop must be a list of strings")
    if req.suffix is not None and not isinstance(req.suffix, str):
        raise ValueError("suffix must be a string")


class Admission:
    """Fills a `Seq`'s admission record (`Seq.adm`) so the context thread can run it (`__call__`, on the output
    thread)."""

    def __init__(self, model, n_ctx_seq: int, vocab_out: Vocab, facts: ChatFacts | None = None):
        self.vocab = L.llama_model_get_vocab(model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_seq = n_ctx_seq
        self.vocab_out = vocab_out
        raw_tpl = L.llama_model_chat_template(model, None)
        own = raw_tpl.decode("utf-8", "replace") if raw_tpl else None
        self.facts = facts
        self.template = own or (facts.template if facts else None)
        self.family = facts.family if facts else GENERIC.name
        self.turn_stops = list(facts.stops) if facts and not own else []
        self.bos_id, eos_id = L.llama_vocab_bos(self.vocab), L.llama_vocab_eos(self.vocab)
        self.bos = self._special(self.bos_id)
        self.eos = self._special(eos_id)
        self._shown: dict[str, frozenset] = {}
        fim = (L.llama_vocab_fim_pre(self.vocab), L.llama_vocab_fim_suf(self.vocab), L.llama_vocab_fim_mid(self.vocab))
        self.fim = fim if all(t >= 0 for t in fim) else None
        self.mark_last_user = False     # set when the model takes context checkpoints (prompt_cache.PromptCache)
        self.media = None               # media.Media when the model has a projector (runner main)
        self.vision_missing = ""        # why it has none though its layout names one (mtmd_lib.VisionUnavailable)
        self.prefix_tokens = PrefixTokens(self.vocab, vocab_out.piece)
        # the prompt's other forms for prompt lookup (speculation/prompt_views.py), set by the runner when it drafts
        # so; the escaped view's tokenizer remembers its own texts (they repeat from one agent turn to the next)
        self.views: PromptViews | None = None
        self.history = PromptHistory(vocab_out.piece)   # the cache-miss explainer's earlier prompts (explain.py)

    def enable_views(self) -> None:
        """Give every request the views of its prompt (the runner drafts by prompt lookup)."""
        escaped = PrefixTokens(self.vocab, self.vocab_out.piece)
        self.views = PromptViews(escaped.tokenize, lambda text, add: tokenize(self.vocab, text, add, False))

    def _special(self, token: int) -> str:
        return self.vocab_out.piece(token, special=True).decode("utf-8", "replace") if token >= 0 else ""

    def _special_id(self, text: str) -> int | None:
        """The id of a control/user-defined token spelled `text` (a family marker), if the vocabulary has one."""
        toks = tokenize(self.vocab, text, add_special=False, parse_special=True)
        if len(toks) == 1 and self.vocab_out.piece(toks[0], special=True).decode("utf-8", "replace") == text:
            return toks[0]
        return None

    def __call__(self, seq: Seq) -> None:
        req, adm = seq.req, seq.adm        # admission writes only `adm` and the output state (sequence.py)
        validate(req)
        chat = not req.raw and (req.messages is not None or req.prompt is not None) and req.suffix is None
        if req.suffix is not None:
            toks, text = self.infill_tokens(req), ""
        elif has_images(req):
            adm.media = self.media_prompt(req)
            text, toks = "", adm.media.tokens
        else:
            text = self.prompt_text(req)
            toks = self.tokens_of(text, self.context_tokens(req))
        adm.n_keep = min(N_KEEP, len(toks))
        if adm.media is not None:       # images are never cut or dropped: a prompt that does not fit is refused
            reserve = context_fit.reply_room(req.overflow, max(0, int(req.reserve or 0)), self.n_ctx_seq)
            if not context_fit.fits(len(toks), reserve, self.n_ctx_seq):
                raise context_fit.ContextOverflow(len(toks), reserve, self.n_ctx_seq)
        else:
            toks, text = self.fit(seq, req, toks, text)
        if chat and self.mark_last_user and not (adm.dropped_messages or adm.truncated_tokens):
            adm.checkpoint_at = self.last_user_start(req, toks)
        adm.prompt = np.asarray(toks, dtype=np.int32)
        adm.n_prompt = len(toks)
        if adm.media is None:
            adm.report = self.explain(seq, req, text if chat and not adm.truncated_tokens else "", toks)
        if self.views is not None and seq.speculate and text:
            adm.views = self.views(text)
        g, label = self.grammar(req)
        chain = sampling.build_chain(req.sampling, self.n_vocab, self.n_ctx_seq)
        window = sampling.penalty_window(req.sampling, self.n_ctx_seq)
        try:
            adm.sampler = SeqSampler(chain, self.vocab, self.n_vocab, g, label, self.vocab_out.piece,
                                     greedy_pick(req.sampling, window))
        except BaseException:
            sampling.free_chain(chain)
            raise
        adm.sampler.accept_prompt(adm.prompt[adm.prompt >= 0], window)   # image pseudo-tokens are no vocabulary
        family = self.plan_of(req).family
        seq.out.detok = Detokenizer(self.vocab_out, self.shown_for(family) if chat else frozenset(),
                                    self.thinking_prefix(text) if chat else "")
        budget = self.think_budget(req, adm.n_prompt) if chat else None
        if budget is not None:
            close = tokenize(self.vocab, think_budget.markers(family)[2], add_special=False, parse_special=True)
            adm.sampler.budget = think_budget.ThinkBudget(budget, family, close,
                                                          self.vocab_out.piece, bool(self.thinking_prefix(text)))
            adm.think_budget = budget
        if req.bar_calls and chat:
            adm.sampler.hold = self.answer_hold(family)
        stops = list(req.stop) + (self.turn_stops if chat else [])
        seq.out.stop = StopMatcher(stops)
        adm.stop_bytes = StopBytes(stops) if any(stops) else None

    def answer_hold(self, family: str) -> answer_hold.AnswerHold:
        """`bar_calls` (answer_hold.py): the reply opens with text, neither its end (or another control token) nor
        a call's start; a thinking block may still open it."""
        think = [t for t in map(self._special_id, format_for(family).think or ()) if t is not None]
        barred = np.setdiff1d(np.union1d(answer_hold.end_tokens(self.vocab, self.n_vocab),
                                         answer_hold.call_start_tokens(self.vocab, self.n_vocab)), think)
        return answer_hold.AnswerHold(barred, barred, self.vocab_out.piece)

    def explain(self, seq: Seq, req, text: str, toks: list[int]) -> dict | None:
        """The prompt's anatomy and how it compares with this runner's earlier prompts (cache/explain.py); None
        when that fails (it never fails the request)."""
        try:
            msgs = None
            if text:
                msgs = req.messages if req.messages is not None else \
                    chat_template.prompt_messages(req.prompt, req.system)
            return self.history.admit(seq.id, text, toks, msgs, req.tools if req.render_tools else None)
        except Exception:  # noqa: BLE001 - a report is an extra: the request goes on without one
            log.exception("explaining the prompt of %s failed", seq.id)
            return None

    def fit(self, seq: Seq, req, toks: list[int], text: str) -> tuple[list[int], str]:
        """The prompt fitted to the context by the request's `overflow` rule (context_fit.py); what was dropped
        or cut is counted on `seq.adm`. ContextOverflow (a ValueError) when it is refused."""
        adm = seq.adm
        limit, overflow = self.n_ctx_seq, req.overflow
        if overflow not in context_fit.OVERFLOWS:
            raise ValueError(f"overflow must be one of {', '.join(context_fit.OVERFLOWS)}")
        reserve = context_fit.reply_room(overflow, max(0, int(req.reserve or 0)), limit)
        if context_fit.fits(len(toks), reserve, limit):
            return toks, text
        if overflow == context_fit.OVERFLOW_DROP and req.messages is not None and not req.raw and req.suffix is None:
            kept, adm.dropped_messages = context_fit.drop_oldest(req.messages, lambda m: self._count(m, req),
                                                                 reserve, limit)
            text = self.render(kept, req)
            return self.tokens_of(text), text
        if overflow == context_fit.OVERFLOW_TRUNCATE:
            cut = context_fit.truncate_tokens(toks, adm.n_keep, reserve, limit)
            adm.truncated_tokens = len(toks) - len(cut)
            return cut, text
        raise context_fit.ContextOverflow(len(toks), reserve, limit)

    def _count(self, messages, req) -> int | None:
        """Tokens of `messages` through the template; None when the template refuses them (e.g. roles that do
        not alternate once older messages are gone)."""
        try:
            return len(self.tokens_of(self.render(messages, req)))
        except ValueError:
            return None

    def grammar(self, req):
        """(grammar, what it is called in errors): what the request's plan names (chat/plan.py: a tool-call
        grammar; with tool_choice auto and a `format`, one for either calls or content in that format), else the
        `format` grammar, else (None, "")."""
        fmt = grammar.grammar_for(req.json_mode, req.json_schema)
        label = "format JSON schema" if req.json_schema is not None else "format json"
        plan = self.plan_of(req)
        g = tool_grammar.for_plan(req.tools, plan, fmt)
        if isinstance(g, str):
            return g, f"tool-call or {label} (tool_choice {plan.tool_choice})"
        if g is not None:
            return g, f"tool-call (tool_choice {plan.tool_choice})"
        return fmt, label

    def plan_of(self, req) -> ChatPlan:
        """The request's plan (the service's); without one (a bare runner request), the loaded model's family
        and no tools."""
        return req.plan if req.plan is not None else ChatPlan(self.family)

    def shown_for(self, family: str) -> frozenset:
        """The ids of the family's markers a reply shows as text (looked up once per family)."""
        ids = self._shown.get(family)
        if ids is None:
            ids = self._shown[family] = frozenset(t for t in (self._special_id(m) for m in format_for(family).shown)
                                                  if t is not None)
        return ids

    def think_budget(self, req, n_prompt: int) -> int | None:
        """The request's thinking budget: its own (`think_budget`, < 0: none), else its effort level's share of the
        reply's room (num_predict, within what the context leaves after the prompt), else None."""
        if req.think_budget is not None:
            return req.think_budget if req.think_budget >= 0 else None
        effort = getattr(req, "think_effort", None)
        if effort not in think_budget.EFFORT_BUDGETS:
            return None
        room = self.n_ctx_seq - n_prompt
        if req.num_predict > 0:
            room = min(room, req.num_predict)
        return think_budget.effort_budget(effort, room)

    def thinking_prefix(self, prompt: str) -> str:
        """The thinking marker the template left open at the end of the prompt (DeepSeek-R1, QwQ, Qwen3 with
        thinking forced): the reply starts inside thinking, so its text starts with the marker for the parser."""
        marker = self.facts.think_open if self.facts else None
        if marker and prompt.rstrip().endswith(marker):
            return marker
        return ""

    def render(self, messages, req, add_generation_prompt: bool = True) -> str:
        return chat_template.render_chat(self.template, messages, bos_token=self.bos, eos_token=self.eos,
                                         add_generation_prompt=add_generation_prompt,
                                         tools=req.tools if req.render_tools else None,
                                         template_kwargs=req.template_kwargs)

    def last_user_start(self, req, toks: list[int]) -> list[int]:
        """[the prompt position where the last user message starts] (a context checkpoint goes there: an edited
        or regenerated last message, or another question after the same system prompt, continues from it), or
        [] when there is no earlier message. Found as the common prefix of the prompt and the conversation
        rendered without that message (one more template render and tokenize, on the output thread)."""
        msgs = req.messages if req.messages is not None else chat_template.prompt_messages(req.prompt, req.system)
        users = [i for i, m in enumerate(msgs) if isinstance(m, dict) and m.get("role") == "user"]
        if not users or users[-1] == 0:
            return []
        try:
            head = self.tokens_of(self.render(msgs[:users[-1]], req, add_generation_prompt=False),
                                  self.context_tokens(req))
        except Exception:  # noqa: BLE001 - a template that refuses a conversation without a last user message
            return []
        n = common_prefix(head, toks)
        return [n] if 0 < n < len(toks) - 1 else []

    def prompt_text(self, req) -> str:
        """The text to tokenize: messages through the chat template (or joined, raw), or the prompt."""
        if req.messages is not None and not req.raw:
            return self.render(req.messages, req)
        if req.messages is not None:
            return "".join(str(m.get("content") or "") for m in chat_template.validate_messages(req.messages))
        if req.prompt is not None:
            if not isinstance(req.prompt, str):
                raise ValueError("prompt must be a string")
            if req.raw:
                return req.prompt
            return self.render(chat_template.prompt_messages(req.prompt, req.system), req)
        raise ValueError("the request needs a prompt or messages")

    def infill_tokens(self, req) -> list[int]:
        """Fill-in-the-middle: [BOS] <fim_pre> prefix <fim_suf> suffix <fim_mid>, as llama-server lays it out."""
        if self.fim is None:
            raise ValueError("this model has no fill-in-the-middle tokens (suffix / insert is not supported)")
        if not isinstance(req.prompt, str):
            raise ValueError("prompt must be a string")
        pre, suf, mid = self.fim
        toks = [self.bos_id] if L.llama_vocab_get_add_bos(self.vocab) and self.bos_id >= 0 else []
        toks += [pre] + tokenize(self.vocab, req.prompt, False, False)
        toks += [suf] + tokenize(self.vocab, req.suffix, False, False) + [mid]
        return toks

    def tokens_of(self, text: str, context: list[int] | None = None) -> list[int]:
        """`text` tokenized, after the `context` token ids when given (then no BOS is added in between). A long
        text that repeats an earlier one is tokenized from the earlier tokens on (prefix_tokens.py)."""
        toks = self.prefix_tokens.tokenize(text, add_special=not context)
        if len(toks) >= 2 and toks[0] == toks[1] == self.bos_id:
            toks = toks[1:]                       # the template wrote BOS and the tokenizer added another
        toks = (context or []) + toks
        if not toks:
            raise ValueError("the prompt is empty")
        return toks

    def media_prompt(self, req):
        """A prompt with images (media.py): mtmd's marker where each image goes, tokenized by mtmd. The caller
        frees the MediaPrompt (Seq.free_media)."""
        if self.media is None and self.vision_missing:
            raise ValueError(f"this runner cannot read images: {self.vision_missing}")
        if self.media is None:
            raise ValueError("this model has no vision projector: it cannot read images (missing capability: vision)")
        if req.context:
            raise ValueError("context cannot be combined with images")
        marked, images = with_markers(req, self.media.marker)
        text = self.prompt_text(marked)
        add_special = not (self.bos and text.startswith(self.bos))     # the template wrote BOS itself
        mp = self.media.tokenize(text, images, add_special)
        if not mp.tokens or mp.tokens[-1] < 0:
            mp.free()
            raise ValueError("a prompt cannot end with an image: put text after it")
        return mp

    def prompt_tokens(self, req) -> list[int]:
        if req.suffix is not None:
            return self.infill_tokens(req)
        if has_images(req):
            mp = self.media_prompt(req)
            mp.free()
            return mp.tokens
        return self.tokens_of(self.prompt_text(req), self.context_tokens(req))

    def context_tokens(self, req) -> list[int]:
        """Ollama's /api/generate `context`: the token ids a previous reply returned, put before this prompt
        as they are (no detokenize/retokenize round trip, so the prompt cache finds them in KV)."""
        ctx = req.context
        if not ctx:
            return []
        if not isinstance(ctx, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ctx):
            raise ValueError("context must be a list of token ids")
        if not all(0 <= t < self.n_vocab for t in ctx):
            raise ValueError(f"context holds a token id outside the vocabulary (0..{self.n_vocab - 1})")
        return list(ctx)


def with_markers(req, marker: str):
    """(the request with `marker` before the text of each message or prompt that carries images, and the images
    taken out; the images in prompt order)."""
    images: list[bytes] = []
    messages = req.messages
    if messages is not None:
        messages = []
        for m in req.messages:
            if isinstance(m, dict) and m.get("images"):
                imgs = list(m["images"])
                images.extend(imgs)
                rest = {k: v for k, v in m.items() if k != "images"}
                content = rest.get("content") or ""
                rest["content"] = marker * len(imgs) + (content if isinstance(content, str) else "")
                messages.append(rest)
            else:
                messages.append(m)
    prompt = req.prompt
    if req.images:
        images = list(req.images) + images
        prompt = marker * len(req.images) + (prompt or "")
    return replace(req, messages=messages, prompt=prompt, images=None), images
