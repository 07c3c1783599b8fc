"""sentence-transformers `encode` over a stream of batches, as a retrieval indexer runs
it: a MiniLM-shaped BERT (6 layers, hidden 384, random weights, built from a config and a
generated WordPiece vocabulary since nothing can be downloaded) with mean pooling, fed
chunks of 512 synthetic sentences of 5-120 words, `model.encode(chunk, batch_size=32)`
returning numpy arrays, the library's defaults otherwise.

    python workloads/programs/st_encode.py [--batch-size 32] [--chunks 24] [--fp16]
        [--to-tensor] [--max-seq-length 256]
"""

import argparse
import os
import random
import tempfile

import torch
from sentence_transformers import SentenceTransformer, models
from transformers import BertConfig, BertModel, BertTokenizerFast

VOCAB = 8000


def build_model_dir(path: str) -> None:
    """A local model folder, as `save_pretrained` writes it (weights random)."""
    words = [f"w{i}" for i in range(VOCAB)]
    with open(os.path.join(path, "vocab.txt"), "w") as fh:
        fh.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    BertTokenizerFast(vocab_file=os.path.join(path, "vocab.txt")).save_pretrained(path)
    config = BertConfig(
        vocab_size=VOCAB + 5, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
        intermediate_size=1536, max_position_embeddings=512,
    )  # fmt: skip
    BertModel(config).save_pretrained(path)


def sentences(n: int, rng: random.Random) -> list[str]:
    return [" ".join(f"w{rng.randrange(VOCAB)}" for _ in range(rng.randint(5, 120))) for _ in range(n)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--chunk", type=int, default=512)
    p.add_argument("--chunks", type=int, default=24)
    p.add_argument("--max-seq-length", type=int, default=256)
    p.add_argument("--fp16", action="store_true", help="model.half()")
    p.add_argument("--to-tensor", action="store_true", help="convert_to_tensor=True (stay on the GPU)")
    args = p.parse_args()
    path = tempfile.mkdtemp(prefix="st-minilm-")
    build_model_dir(path)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    word = models.Transformer(path, max_seq_length=args.max_seq_length)
    pool = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="mean")
    model = SentenceTransformer(modules=[word, pool], device=device)
    if args.fp16:
        model.half()
    rng = random.Random(0)
    stream = [sentences(args.chunk, rng) for _ in range(args.chunks)]
    total = 0
    for chunk in stream:
        emb = model.encode(chunk, batch_size=args.batch_size, convert_to_tensor=args.to_tensor, show_progress_bar=False)
        total += len(emb)
    print(f"encoded {total} sentences")


if __name__ == "__main__":
    main()
