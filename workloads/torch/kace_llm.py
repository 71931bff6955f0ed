"""LLM inference workloads: token-by-token greedy generation with a KV cache on a
decoder-only model built from a transformers config with random weights
(nothing is downloaded, no tokenizer), reporting tokens/s to kace.

    python3 workloads/torch/llama.py --batch 8 [--dtype bf16] [--prompt 512] [--new-tokens 256]

One generation: a prefill of a fixed random prompt of --prompt tokens per
sequence, which gives the first new token, then --new-tokens - 1 decode steps
of one token each, feeding the model's past_key_values (a DynamicCache in
transformers 5) back in; the next token is the argmax of the last logits
(greedy). When --new-tokens tokens are done the cache is dropped and the next
generation starts (the prefill's time is part of the throughput, as in
serving). One sample = one generated token of one sequence: after each
forward pass (prefill or decode step) the workload reports --batch samples,
so kace's throughput is tokens/s.

The loop calls model(input_ids=..., past_key_values=..., use_cache=True) and
reads .logits and .past_key_values from the output, which transformers 4.x
and 5.x both accept; model.generate is avoided (its overheads, defaults and
stopping rules change between versions). After each step the workload waits
for the GPU, as generate's stopping checks do.

--dtype (default bf16, what the catalog runs): bf16 casts the weights to
bfloat16 (how LLMs are served); tf32 keeps fp32 weights with TF32 tensor
cores; fp32 turns TF32 off.
"""
import argparse
import inspect
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kace_torch import DTYPES, setup_dtype, synchronize  # noqa: E402  (puts workloads/ on sys.path)
from kace_progress import Progress  # noqa: E402

# Shapes of real models; the weights are random. RoPE keeps transformers' default
# settings (the scaling of long contexts changes no kernel at these lengths).
CONFIGS = {
    # Llama-3.2-1B's shape: 1.24 B parameters, grouped-query attention 32/8 heads of 64.
    "llama-1b": ("LlamaConfig", "LlamaForCausalLM",
                 dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                      num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096,
                      tie_word_embeddings=True)),
    # Qwen2-0.5B / Qwen2.5-0.5B's shape: 0.49 B parameters, 14/2 heads of 64, a large vocabulary.
    "qwen2-0.5b": ("Qwen2Config", "Qwen2ForCausalLM",
                   dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                        num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                        tie_word_embeddings=True)),
}


def build(model, device):
    """Returns the causal LM with random float32 weights, created on device."""
    import torch
    import transformers as tf

    if model not in CONFIGS:
        raise SystemExit("unknown model %s" % model)
    config_name, model_name, sizes = CONFIGS[model]
    cfg = getattr(tf, config_name)(**sizes)
    with torch.device(device):
        return getattr(tf, model_name)(cfg)


def prefill_options(net):
    """Asks the prefill for the last position's logits only, as generate does,
    where the model's forward takes that argument (logits_to_keep since
    transformers 4.50, num_logits_to_keep in 4.45-4.49)."""
    try:
        params = inspect.signature(net.forward).parameters
    except (TypeError, ValueError):
        return {}
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in params:
            return {name: 1}
    return {}


def main(model):
    ap = argparse.ArgumentParser(description="%s-shaped causal LM with random weights: greedy generation "
                                 "with a KV cache, reporting tokens/s to kace" % model)
    ap.add_argument("--mode", choices=["inf"], default="inf", help="inference only (the catalog's names say -inf)")
    ap.add_argument("--batch", type=int, default=1, help="sequences generated together (default 1)")
    ap.add_argument("--dtype", choices=DTYPES, default="bf16",
                    help="bf16: bfloat16 weights; tf32: fp32 on TF32 tensor cores; fp32: TF32 off (default bf16)")
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens per sequence (default 512)")
    ap.add_argument("--new-tokens", type=int, default=256,
                    help="tokens generated per sequence before generation restarts (default 256)")
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until kace stops it)")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    if args.batch < 1 or args.prompt < 1 or args.new_tokens < 1:
        ap.error("--batch, --prompt and --new-tokens must be at least 1")
    import torch

    weight_dtype = setup_dtype(args.dtype)
    net = build(model, args.device)
    net.eval()
    if weight_dtype is not None:
        net.to(weight_dtype)
        if torch.device(args.device).type == "cuda":
            torch.cuda.empty_cache()  # give back the float32 copy's memory
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, net.config.vocab_size, (args.batch, args.prompt), generator=g).to(args.device)
    first = prefill_options(net)

    def running():
        return args.seconds <= 0 or time.monotonic() - t0 < args.seconds

    progress = Progress()
    t0 = time.monotonic()
    with torch.inference_mode():
        while running():
            out = net(input_ids=prompt, use_cache=True, **first)  # prefill: the first new token
            for done in range(1, args.new_tokens + 1):
                cache = out.past_key_values
                ids = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)  # (batch, 1), greedy
                synchronize(args.device)
                progress.step(args.batch)
                if done == args.new_tokens or not running():
                    break
                out = net(input_ids=ids, past_key_values=cache, use_cache=True)  # decode one token
            del out, cache, ids  # the next generation starts with an empty cache
