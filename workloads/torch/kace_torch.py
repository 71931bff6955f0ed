"""PyTorch workloads of the KACE paper, built from transformers configs with
random weights (nothing is downloaded), reporting progress to kace.

    python3 workloads/torch/bert.py --mode train --batch 8 [--seconds 0] [--device cuda]

One sample = one input example (a sequence, an image, an audio clip), so
kace's throughput is examples/s as in the paper. Needs torch and
transformers (not Debian packages of this project: install them on the
GPU machine, e.g. a CUDA PyTorch wheel).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kace_progress import Progress  # noqa: E402


def build(model, batch, device):
    """Returns (module, inputs) for a paper model; weights are random."""
    import torch
    import transformers as tf

    g = torch.Generator().manual_seed(0)
    if model == "bert-base-cased":
        cfg = tf.BertConfig(vocab_size=28996)  # bert-base-cased's vocabulary, base sizes
        net = tf.BertForSequenceClassification(cfg)
        ids = torch.randint(0, cfg.vocab_size, (batch, 128), generator=g)
        inputs = {"input_ids": ids, "labels": torch.randint(0, 2, (batch,), generator=g)}
    elif model == "albert-base-v2":
        cfg = tf.AlbertConfig(hidden_size=768, num_attention_heads=12, intermediate_size=3072)
        net = tf.AlbertForSequenceClassification(cfg)
        ids = torch.randint(0, cfg.vocab_size, (batch, 128), generator=g)
        inputs = {"input_ids": ids, "labels": torch.randint(0, 2, (batch,), generator=g)}
    elif model == "vit-base-patch16-224":
        cfg = tf.ViTConfig(image_size=224, patch_size=16, num_labels=1000)
        net = tf.ViTForImageClassification(cfg)
        inputs = {"pixel_values": torch.randn(batch, 3, 224, 224, generator=g),
                  "labels": torch.randint(0, 1000, (batch,), generator=g)}
    elif model == "whisper-large-v2":
        cfg = tf.WhisperConfig(vocab_size=51865, num_mel_bins=80, d_model=1280, encoder_layers=32,
                               decoder_layers=32, encoder_attention_heads=20, decoder_attention_heads=20,
                               encoder_ffn_dim=5120, decoder_ffn_dim=5120)
        net = tf.WhisperForConditionalGeneration(cfg)
        inputs = {"input_features": torch.randn(batch, 80, 3000, generator=g),
                  "labels": torch.randint(0, cfg.vocab_size, (batch, 64), generator=g)}
    elif model == "wav2vec2-base-960h":
        cfg = tf.Wav2Vec2Config(vocab_size=32)
        net = tf.Wav2Vec2ForCTC(cfg)
        inputs = {"input_values": torch.randn(batch, 16000 * 5, generator=g),  # 5 s clips at 16 kHz
                  "labels": torch.randint(1, cfg.vocab_size, (batch, 40), generator=g)}
    else:
        raise SystemExit("unknown model %s" % model)
    return net.to(device), {k: v.to(device) for k, v in inputs.items()}


def main(model):
    ap = argparse.ArgumentParser(description="%s with random weights, reporting progress to kace" % model)
    ap.add_argument("--mode", choices=["train", "inf"], default="train")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until kace stops it)")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    import torch

    net, inputs = build(model, args.batch, args.device)
    progress = Progress()
    t0 = time.monotonic()
    if args.mode == "train":
        net.train()
        opt = torch.optim.AdamW(net.parameters(), lr=1e-5)
        while args.seconds <= 0 or time.monotonic() - t0 < args.seconds:
            opt.zero_grad(set_to_none=True)
            loss = net(**inputs).loss
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            progress.step(args.batch)
    else:
        net.eval()
        inputs.pop("labels", None)
        if model == "whisper-large-v2":  # inference: encoder + a short decoder prefix
            inputs["decoder_input_ids"] = torch.zeros(args.batch, 1, dtype=torch.long, device=args.device)
        with torch.inference_mode():
            while args.seconds <= 0 or time.monotonic() - t0 < args.seconds:
                net(**inputs)
                torch.cuda.synchronize()
                progress.step(args.batch)
