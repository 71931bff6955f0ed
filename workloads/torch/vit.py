"""vit-base-patch16-224 (random weights): python3 workloads/torch/vit.py --mode train|inf --batch B [--dtype bf16|tf32|fp32]"""
from kace_torch import main

if __name__ == "__main__":
    main("vit-base-patch16-224")
