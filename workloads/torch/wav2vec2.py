"""wav2vec2-base-960h (random weights): python3 workloads/torch/wav2vec2.py --mode train|inf --batch B [--dtype bf16|tf32|fp32]"""
from kace_torch import main

if __name__ == "__main__":
    main("wav2vec2-base-960h")
