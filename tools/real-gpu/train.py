#!/usr/bin/env python3
"""A small PyTorch training job for carma's real-GPU checks.

Trains MODEL at BATCH on synthetic data for STEPS steps and prints, on
stdout, one JSON line with the wall-clock times of its first line and of
its first CUDA kernel, and its peak memory as PyTorch saw it. Used both as
a job carma runs (steps 2, 3 and 5 of run.sh) and by measure.py (step 4).

    train.py MODEL BATCH STEPS [--alloc-gib N] [--summary FILE]

--alloc-gib N  also holds N GiB on the GPU (a job whose estimate is too low)
--summary FILE writes the model's module print (as a user would paste it)
"""
import argparse
import json
import sys
import time

STARTED = time.time()

import torch  # noqa: E402


def build(name):
    """A torchvision or transformers model by name, and its input maker."""
    if name.startswith(("bert", "gpt2", "distilbert", "roberta")):
        import transformers

        configs = {
            "bert-base": transformers.BertConfig(),
            "bert-large": transformers.BertConfig(
                hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                intermediate_size=4096),
            "distilbert": transformers.DistilBertConfig(),
            "roberta-base": transformers.RobertaConfig(),
            "gpt2": transformers.GPT2Config(),
            "gpt2-medium": transformers.GPT2Config(n_embd=1024, n_layer=24, n_head=16),
        }
        config = configs[name]
        model = transformers.AutoModelForSequenceClassification.from_config(config) \
            if not name.startswith("gpt2") else transformers.GPT2LMHeadModel(config)
        vocab = config.vocab_size

        def inputs(batch, device):
            ids = torch.randint(0, vocab, (batch, 128), device=device)
            return {"input_ids": ids, "labels": ids if name.startswith("gpt2")
                    else torch.zeros(batch, dtype=torch.long, device=device)}

        return model, inputs, True
    import torchvision

    model = getattr(torchvision.models, name)(weights=None)
    size = 299 if name.startswith("inception") else 224

    def inputs(batch, device):
        return {"x": torch.randn(batch, 3, size, size, device=device),
                "y": torch.randint(0, 1000, (batch,), device=device)}

    return model, inputs, False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("batch", type=int)
    parser.add_argument("steps", type=int)
    parser.add_argument("--alloc-gib", type=float, default=0.0)
    parser.add_argument("--summary")
    args = parser.parse_args()
    device = torch.device("cuda")
    model, inputs, hf = build(args.model)
    if args.summary:
        with open(args.summary, "w") as out:
            out.write(str(model) + "\n")
    model = model.to(device).train()
    first_kernel = None
    hold = None
    if args.alloc_gib > 0:
        hold = torch.empty(int(args.alloc_gib * 2**30), dtype=torch.uint8, device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(args.steps):
        batch = inputs(args.batch, device)
        if hf:
            loss = model(**batch).loss
        else:
            out = model(batch["x"])
            out = out.logits if hasattr(out, "logits") else out
            loss = loss_fn(out, batch["y"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if first_kernel is None:
            torch.cuda.synchronize()
            first_kernel = time.time()
    torch.cuda.synchronize()
    del hold
    print(json.dumps({
        "model": args.model,
        "batch": args.batch,
        "started": STARTED,
        "first_kernel": first_kernel,
        "ended": time.time(),
        "max_reserved_mib": torch.cuda.max_memory_reserved() // 2**20,
        "max_allocated_mib": torch.cuda.max_memory_allocated() // 2**20,
    }), flush=True)


if __name__ == "__main__":
    sys.exit(main())
