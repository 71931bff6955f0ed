"""llama-1b (Llama-3.2-1B's shape, random weights), greedy generation with a KV cache, tokens/s:
python3 workloads/torch/llama.py --batch B [--dtype bf16|tf32|fp32] [--prompt 512] [--new-tokens 256]"""
from kace_llm import main

if __name__ == "__main__":
    main("llama-1b")
