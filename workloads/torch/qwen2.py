"""qwen2-0.5b (Qwen2-0.5B's shape, random weights), greedy generation with a KV cache, tokens/s:
python3 workloads/torch/qwen2.py --batch B [--dtype bf16|tf32|fp32] [--prompt 512] [--new-tokens 256]"""
from kace_llm import main

if __name__ == "__main__":
    main("qwen2-0.5b")
