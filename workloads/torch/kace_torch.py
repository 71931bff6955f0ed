"""PyTorch workloads of the KACE paper, built from transformers configs with
random weights (nothing is downloaded), reporting progress to kace.

    python3 workloads/torch/bert.py --mode train --batch 8 [--dtype bf16] [--seconds 0] [--device cuda]

One sample = one input example (a sequence, an image, an audio clip), so
kace's throughput is examples/s as in the paper. The LLM generation
workloads (tokens/s) are in kace_llm.py. Needs torch and transformers (not
Debian packages of this project: install them on the GPU machine, e.g. a
CUDA PyTorch wheel). torch is imported only after the arguments are parsed,
so that --help works without it.

--dtype (default bf16, what the catalog runs):
  bf16  training: torch.autocast(bfloat16) with fp32 master weights and AdamW
        state, as Hugging Face Trainer's bf16=True, Lightning's "bf16-mixed"
        and most fine-tuning recipes do (pure bf16 weights lose small updates);
        inference: the model cast to bfloat16 (model.to(torch.bfloat16)), as
        users load models for serving (dtype=torch.bfloat16): half the memory
        and bandwidth of autocast, which would keep fp32 weights.
  tf32  fp32 weights and activations, matrix products and convolutions on
        TF32 tensor cores (torch.backends ... allow_tf32 / fp32_precision).
  fp32  fp32 with TF32 off: matrix products on FP32 SIMT kernels (rare on
        H100; for comparison with the V100-era paper data only).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kace_progress import Progress  # noqa: E402

DTYPES = ("bf16", "tf32", "fp32")


def set_tf32(enabled):
    """TF32 on or off for cuBLAS matrix products and every cuDNN operation.

    Through the two setters that keep PyTorch's legacy flags and its newer
    fp32_precision settings in step: set_float32_matmul_precision sets both
    for matrix products, and the legacy cudnn.allow_tf32 sets cuDNN's
    convolutions, RNNs and its own flag together. Setting only the newer
    matmul/conv fp32_precision (as kace once did) leaves cuDNN's RNN and
    legacy flags at TF32; PyTorch 2.9+ then refuses the mix when anything
    asks cuDNN's flag without naming an operation, as
    torch.backends.cudnn.flags() does around Wav2Vec2ForCTC's CTC loss: the
    training step raised RuntimeError (pytorch/pytorch#179445)."""
    import torch

    torch.set_float32_matmul_precision("high" if enabled else "highest")
    torch.backends.cudnn.allow_tf32 = enabled


def setup_dtype(name):
    """Applies --dtype's global settings; returns the torch dtype of the
    weights for inference (bf16) or None (fp32 weights)."""
    import torch

    set_tf32(name == "tf32")
    return torch.bfloat16 if name == "bf16" else None


def synchronize(device):
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def build(model, batch, device):
    """Returns (module, inputs) for a paper model on device; weights are random,
    float32. The module is created directly on the device (torch.device as a
    context manager), which initialises 1.5 billion weights in a second or
    two instead of tens of seconds on the CPU."""
    import torch
    import transformers as tf

    g = torch.Generator().manual_seed(0)
    if model == "bert-base-cased":
        cfg = tf.BertConfig(vocab_size=28996)  # bert-base-cased's vocabulary, base sizes
        cls = tf.BertForSequenceClassification
        ids = torch.randint(0, cfg.vocab_size, (batch, 128), generator=g)
        inputs = {"input_ids": ids, "labels": torch.randint(0, 2, (batch,), generator=g)}
    elif model == "albert-base-v2":
        # albert-base-v2's sizes (AlbertConfig's defaults are xxlarge's): 12 shared layers,
        # embeddings 128, hidden 768, vocabulary 30000.
        cfg = tf.AlbertConfig(hidden_size=768, num_attention_heads=12, intermediate_size=3072)
        cls = tf.AlbertForSequenceClassification
        ids = torch.randint(0, cfg.vocab_size, (batch, 128), generator=g)
        inputs = {"input_ids": ids, "labels": torch.randint(0, 2, (batch,), generator=g)}
    elif model == "vit-base-patch16-224":
        cfg = tf.ViTConfig(image_size=224, patch_size=16, num_labels=1000)
        cls = tf.ViTForImageClassification
        inputs = {"pixel_values": torch.randn(batch, 3, 224, 224, generator=g),
                  "labels": torch.randint(0, 1000, (batch,), generator=g)}
    elif model in ("whisper-large-v2", "whisper-small"):
        if model == "whisper-large-v2":  # 1.55 B parameters
            sizes = dict(d_model=1280, encoder_layers=32, decoder_layers=32, encoder_attention_heads=20,
                         decoder_attention_heads=20, encoder_ffn_dim=5120, decoder_ffn_dim=5120)
        else:  # whisper-small, 244 M parameters
            sizes = dict(d_model=768, encoder_layers=12, decoder_layers=12, encoder_attention_heads=12,
                         decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072)
        cfg = tf.WhisperConfig(vocab_size=51865, num_mel_bins=80, **sizes)
        cls = tf.WhisperForConditionalGeneration
        # 30 s of log-mel features (3000 frames), the only length Whisper's encoder takes.
        inputs = {"input_features": torch.randn(batch, 80, 3000, generator=g),
                  "labels": torch.randint(0, cfg.vocab_size, (batch, 64), generator=g)}
    elif model == "wav2vec2-base-960h":
        cfg = tf.Wav2Vec2Config(vocab_size=32)
        cls = tf.Wav2Vec2ForCTC
        inputs = {"input_values": torch.randn(batch, 16000 * 5, generator=g),  # 5 s clips at 16 kHz
                  "labels": torch.randint(1, cfg.vocab_size, (batch, 40), generator=g)}
    else:
        raise SystemExit("unknown model %s" % model)
    with torch.device(device):
        net = cls(cfg)
    # Configs became strict dataclasses in transformers 5: a keyword one did
    # not take would leave, say, ViT's 2-class default head, and labels up
    # to 999 would end in an opaque device-side assert mid-run.
    if model == "vit-base-patch16-224" and net.classifier.out_features != 1000:
        raise SystemExit("%s: the classifier has %d classes, expected 1000 (transformers %s ignored num_labels)"
                         % (model, net.classifier.out_features, tf.__version__))
    return net, {k: v.to(device) for k, v in inputs.items()}


def main(model):
    ap = argparse.ArgumentParser(description="%s with random weights, reporting progress to kace "
                                 "(one sample = one input example)" % model)
    ap.add_argument("--mode", choices=["train", "inf"], default="train")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dtype", choices=DTYPES, default="bf16",
                    help="bf16: autocast training / bf16 weights for inference; tf32: fp32 on TF32 "
                    "tensor cores; fp32: TF32 off (default bf16)")
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until kace stops it)")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    import torch

    weight_dtype = setup_dtype(args.dtype)
    net, inputs = build(model, args.batch, args.device)
    device_type = torch.device(args.device).type
    t0 = time.monotonic()
    if args.mode == "train":
        net.train()
        opt = torch.optim.AdamW(net.parameters(), lr=1e-5)
        progress = Progress()
        while args.seconds <= 0 or time.monotonic() - t0 < args.seconds:
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device_type, dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
                loss = net(**inputs).loss
            loss.backward()  # outside autocast, as PyTorch's AMP recipe says
            opt.step()
            synchronize(args.device)
            progress.step(args.batch)
    else:
        net.eval()
        inputs.pop("labels", None)
        if weight_dtype is not None:
            net.to(weight_dtype)
            inputs = {k: v.to(weight_dtype) if v.is_floating_point() else v for k, v in inputs.items()}
            if device_type == "cuda":
                torch.cuda.empty_cache()  # give back the float32 copy's memory
        if model.startswith("whisper"):  # inference: encoder + a short decoder prefix
            inputs["decoder_input_ids"] = torch.zeros(args.batch, 1, dtype=torch.long, device=args.device)
        progress = Progress()
        with torch.inference_mode():
            while args.seconds <= 0 or time.monotonic() - t0 < args.seconds:
                net(**inputs)
                synchronize(args.device)
                progress.step(args.batch)
