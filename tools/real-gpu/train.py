#!/usr/bin/env python3
"""A small PyTorch training job for carma's real-GPU checks.

Trains MODEL at BATCH on synthetic data for STEPS steps and prints, on
stdout, one JSON line with the wall-clock times of its first line and of
its first CUDA kernel, and its peak memory as PyTorch saw it. Used both as
a job carma runs (steps 2, 3 and 5 of run.sh) and by measure.py (step 4).

    train.py MODEL BATCH STEPS [--alloc-gib N]
    train.py MODEL 1 0 --summaries DIR

--alloc-gib N    also holds N GiB on the GPU (a job whose estimate is too low)
--summaries DIR  writes the model's summaries as users paste them, made on
                 the CPU at batch 1 (carma is told the batch): the module
                 print with its parameter count, torchinfo's table and, for
                 torchvision models, torchsummary's; then exits
"""
import argparse
import json
import pathlib
import sys
import time

STARTED = time.time()
print(json.dumps({"started": STARTED}), flush=True)

import torch  # noqa: E402

SEQUENCE = 128


def build(name):
    """A torchvision or transformers model by name, its input maker and
    whether it is a Hugging Face model."""
    if name.startswith(("bert", "gpt2", "distilbert", "roberta")):
        import transformers

        configs = {
            "bert-base": transformers.BertConfig,
            "distilbert": transformers.DistilBertConfig,
            "roberta-base": transformers.RobertaConfig,
        }
        if name.startswith("gpt2"):
            config = transformers.GPT2Config() if name == "gpt2" else \
                transformers.GPT2Config(n_embd=1024, n_layer=24, n_head=16)
            model = transformers.GPT2LMHeadModel(config)
        else:
            config = configs[name]()
            model = transformers.AutoModelForSequenceClassification.from_config(config)
        vocab = config.vocab_size

        def inputs(batch, device):
            ids = torch.randint(0, vocab, (batch, SEQUENCE), device=device)
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


def write_summaries(name, model, inputs, hf, out):
    """The summaries a user would save beside the job, each in its own file;
    a tool that fails on this model writes nothing (and says so on stderr)."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    params = sum(p.numel() for p in model.parameters())
    (out / f"{name}.print.txt").write_text(
        f"{model}\n{'=' * 60}\nTotal params: {params:,}\n")
    model.eval()
    sample = inputs(1, "cpu")
    try:
        import torchinfo

        data = [sample["input_ids"]] if hf else [sample["x"]]
        table = torchinfo.summary(model, input_data=data, verbose=0, device="cpu",
                                  col_names=("output_size", "num_params"))
        (out / f"{name}.torchinfo.txt").write_text(f"{table}\n")
    except Exception as e:  # noqa: BLE001 - a tool's failure is reported, not fatal
        print(f"{name}: torchinfo failed: {e!r}", file=sys.stderr)
    if not hf:
        try:
            import contextlib
            import io

            import torchsummary

            text = io.StringIO()
            with contextlib.redirect_stdout(text):
                torchsummary.summary(model, tuple(sample["x"].shape[1:]), batch_size=1,
                                     device="cpu")
            (out / f"{name}.torchsummary.txt").write_text(text.getvalue())
        except Exception as e:  # noqa: BLE001
            print(f"{name}: torchsummary failed: {e!r}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("batch", type=int)
    parser.add_argument("steps", type=int)
    parser.add_argument("--alloc-gib", type=float, default=0.0)
    parser.add_argument("--summaries")
    args = parser.parse_args()
    model, inputs, hf = build(args.model)
    if args.summaries:
        write_summaries(args.model, model, inputs, hf, args.summaries)
        return 0
    device = torch.device("cuda")
    model = model.to(device).train()
    first_kernel = None
    hold = None
    if args.alloc_gib > 0:
        hold = torch.ones(int(args.alloc_gib * 2**30), dtype=torch.uint8, device=device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    for _ in range(args.steps):
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
