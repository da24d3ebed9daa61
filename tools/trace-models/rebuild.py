"""Rebuilds model summaries of the traces' standard architectures from
their public definitions (torchvision, timm, Hugging Face configs), in the
formats of the real job files (torchsummary with the batch in the shape,
annotated module prints), and writes a legacy job file per trace task
with the trace's batch size and GPU count. Tasks whose architecture is
not known (UNet, Mask R-CNN, DLRM) are skipped.

    python3 -m venv /tmp/tv && /tmp/tv/bin/pip install torch torchvision torchsummary transformers timm
    /tmp/tv/bin/python tools/trace-models/rebuild.py /tmp/trace-models data/carma/traces/*.csv

Forward passes run on the CPU with a batch of 2 (torchsummary prints the
batch it is given), so this takes a minute and little memory.
"""
import csv, io, os, sys, contextlib
import torch, torchvision, timm
from torchsummary import summary

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)

def tsum(model, shape, batch, path):
    model.eval()
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), torch.no_grad():
        summary(model, shape, batch_size=batch, device="cpu")
    open(path, "w").write(buf.getvalue())

def annotated(model, path):
    lines = []
    def params(m):
        return sum(p.numel() for p in m.parameters())
    def walk(m, name, indent):
        head = f"({name}): " if name is not None else ""
        kids = list(m.named_children())
        if not kids:
            r = repr(m).replace("\n", " ")
            lines.append(f"{indent}{head}{r}, {params(m):,} params")
            return
        lines.append(f"{indent}{head}{m.__class__.__name__}(")
        for n, c in kids:
            walk(c, n, indent + "  ")
        lines.append(f"{indent}), {params(m):,} params")
    walk(model, None, "")
    total = params(model)
    train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    lines += ["=" * 71, f"Total params: {total:,}", f"Trainable params: {train:,}",
              f"Non-trainable params: {total-train:,}", "-" * 71]
    open(path, "w").write("\n".join(lines))

def rad(name, cmd, model, batch, gpus=1):
    open(f"{OUT}/{name}.rad", "w").write(
        f"# generated\nconda activate tf\npython {cmd}\n{model}\ndata\n{batch}\nexclusive\n{gpus}\n40000\n40000\n40000\n40000")

tv = torchvision.models
jobs = {}
for f in sys.argv[2:]:
    for r in csv.DictReader(open(f)):
        jobs[r["task"]] = r

def cnn(kind):
    if kind == "mobilenet_cifar100": return timm.create_model("efficientnet_b0", num_classes=100), (3, 32, 32)
    if kind == "efficientNet_cifar100": return timm.create_model("efficientnet_b0", num_classes=100), (3, 32, 32)
    if kind == "resnet18_cifar100": return tv.resnet18(num_classes=100), (3, 32, 32)
    if kind == "resnet34_cifar100": return tv.resnet34(num_classes=100), (3, 32, 32)
    if kind == "efficientNet": return tv.efficientnet_b0(), (3, 224, 224)
    if kind == "resnet50": return tv.resnet50(), (3, 224, 224)
    if kind == "Inception": return tv.inception_v3(aux_logits=True, init_weights=False), (3, 299, 299)
    if kind == "Xception": return timm.create_model("legacy_xception"), (3, 299, 299)
    if kind == "vgg": return tv.vgg16(), (3, 224, 224)
    if kind == "mobilenet": return tv.mobilenet_v2(), (3, 224, 224)
    if kind == "UNet": return None, None
    return None, None

from transformers import (BertConfig, BertForMaskedLM, XLNetConfig, XLNetForSequenceClassification,
                          GPT2Config, GPT2LMHeadModel)
def tf(kind):
    if kind == "BERT_large": return BertForMaskedLM(BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096, vocab_size=28996))
    if kind == "xlnet_large": return XLNetForSequenceClassification(XLNetConfig(d_model=1024, n_layer=24, n_head=16, d_inner=4096))
    if kind == "gpt2_large": return GPT2LMHeadModel(GPT2Config(n_embd=1280, n_layer=36, n_head=20))
    return None

done = {}
for task, r in jobs.items():
    kind, b = r["model"], int(r["batch"])
    name = task[:-4]
    model_file = f"{kind}_{b}.model"
    if kind in ("BERT_large", "xlnet_large", "gpt2_large"):
        if model_file not in done:
            annotated(tf(kind), f"{OUT}/{model_file}"); done[model_file] = 1
        rad(name, f"{kind}.py", model_file, b, int(r["gpus"]))
        continue
    m, shape = cnn(kind)
    if m is None:
        print("skip", task, kind); continue
    if model_file not in done:
        tsum(m, shape, b, f"{OUT}/{model_file}"); done[model_file] = 1
    rad(name, f"{kind}.py --batch_size {b}", model_file, b)
    print("ok", task)
