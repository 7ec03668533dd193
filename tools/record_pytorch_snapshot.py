#!/usr/bin/env python3
"""record_pytorch_snapshot.py: records a PyTorch memory snapshot of a small
training job on a CUDA GPU, for `hbm fidelity` (is hbm's model of PyTorch's
caching allocator true to the PyTorch installed here?) and `hbm replay`.

Run by tools/gpu_check_fidelity.sh, one process per allocator setting:
PYTORCH_CUDA_ALLOC_CONF is read once, when CUDA starts, so it is set in the
environment of each run. Needs torch with CUDA (torchvision for --workload
resnet). Not part of CI (CI has no GPU).

  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \\
    python3 tools/record_pytorch_snapshot.py --workload gpt --steps 6 -o gpt.pickle

Workloads:
  gpt     a decoder-only transformer (8 layers, d=1024, vocab 32000), bf16
          autocast, AdamW, batch 8, sequence length drawn from 256..1024 per
          step (the varying shapes that fragment a caching allocator)
  resnet  torchvision's ResNet-50, batch 64, 224x224, bf16 autocast, SGD
          with momentum (convolution workspaces)

--side-stream (gpt) reduces the gradients in buckets on a second stream, as
data-parallel training does: a bucket made on the main stream is used on the
side stream (record_stream: its free waits for that stream), and the result,
made on the side stream, is used back on the main one. --empty-cache-every N
calls torch.cuda.empty_cache() after every N-th step.

--record-from K starts recording at step K (a snapshot that begins mid-run,
with blocks already live). --oom-ok: when the run runs out of memory (under a
per_process_memory_fraction below its need), stop there and write the
snapshot, which then ends with the OOM, instead of failing. One JSON line on
standard output says what happened: torch version, device, total memory, peak
allocated and reserved, retries and OOMs.

Exit: 0 recorded, 1 a failure (or the output exists), 2 usage, 77 no usable
CUDA device or no torch.
"""
import argparse
import json
import os
import random
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=["gpt", "resnet"], default="gpt")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--record-from", type=int, default=0, metavar="K")
    ap.add_argument("--oom-ok", action="store_true")
    ap.add_argument("--side-stream", action="store_true")
    ap.add_argument("--empty-cache-every", type=int, default=0, metavar="N")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    if os.path.exists(args.output):
        sys.exit("record_pytorch_snapshot: %s exists; not overwritten" % args.output)
    try:
        import torch
    except ImportError as e:
        print("record_pytorch_snapshot: no torch: %s" % e)
        return 77
    if not torch.cuda.is_available():
        print("record_pytorch_snapshot: no usable CUDA device")
        return 77

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    dev = torch.device("cuda")
    history = dict(enabled="all", context="all", stacks="python", max_entries=2_000_000)
    if args.record_from == 0:
        torch.cuda.memory._record_memory_history(**history)

    if args.workload == "gpt":
        step = gpt_job(torch, dev, args.side_stream)
    else:
        step = resnet_job(torch, dev)

    oom = None
    done = 0
    for i in range(args.steps):
        if i == args.record_from and i > 0:
            torch.cuda.memory._record_memory_history(**history)
        try:
            step(i)
        except torch.OutOfMemoryError as e:
            if not args.oom_ok:
                raise
            oom = str(e).split("\n")[0]
            break
        done += 1
        if args.empty_cache_every and (i + 1) % args.empty_cache_every == 0:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    torch.cuda.synchronize()
    tmp = args.output + ".tmp"
    torch.cuda.memory._dump_snapshot(tmp)
    os.replace(tmp, args.output)
    torch.cuda.memory._record_memory_history(enabled=None)
    stats = torch.cuda.memory_stats()
    props = torch.cuda.get_device_properties(0)
    print(json.dumps({
        "output": args.output, "workload": args.workload, "steps_done": done,
        "record_from": args.record_from, "torch": torch.__version__, "cuda": torch.version.cuda,
        "device": props.name, "total_memory": props.total_memory,
        "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "peak_allocated": stats.get("allocated_bytes.all.peak", 0),
        "peak_reserved": stats.get("reserved_bytes.all.peak", 0),
        "num_alloc_retries": stats.get("num_alloc_retries", 0),
        "num_ooms": stats.get("num_ooms", 0),
        "segment_allocs": stats.get("segment.all.allocated", 0),
        "segment_frees": stats.get("segment.all.freed", 0),
        "oom": oom,
    }))
    return 0


def gpt_job(torch, dev, side_stream=False):
    nn = torch.nn
    vocab, d, layers, heads, batch = 32000, 1024, 8, 16, 8

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Embedding(1024, d)
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                               norm_first=True, activation="gelu")
            self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, x):
            t = x.shape[1]
            h = self.emb(x) + self.pos(torch.arange(t, device=x.device))
            mask = nn.Transformer.generate_square_subsequent_mask(t, device=x.device)
            h = self.blocks(h, mask=mask, is_causal=True)
            return self.head(self.norm(h))

    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    lengths = [256, 512, 768, 1024]

    def step(i):
        t = random.choice(lengths)
        x = torch.randint(0, vocab, (batch, t), device=dev)
        y = torch.randint(0, vocab, (batch, t), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
            loss = nn.functional.cross_entropy(logits.float().view(-1, vocab), y.view(-1))
        loss.backward()
        if side_stream:
            reduce_on_side_stream(torch, model, side)
        opt.step()
        opt.zero_grad(set_to_none=True)
        del logits, loss

    side = torch.cuda.Stream() if side_stream else None
    return step


def reduce_on_side_stream(torch, model, side, bucket_params=8):
    """Gradient buckets as DDP makes them: flattened on the main stream,
    reduced on a side stream (here a scaling, standing for the all-reduce),
    copied back on the main stream."""
    main = torch.cuda.current_stream()
    params = [p for p in model.parameters() if p.grad is not None]
    for k in range(0, len(params), bucket_params):
        group = params[k:k + bucket_params]
        bucket = torch.cat([p.grad.flatten() for p in group])  # main stream
        side.wait_stream(main)
        with torch.cuda.stream(side):
            reduced = bucket * 0.5                          # a block of the side stream
        bucket.record_stream(side)                          # its free waits for the side stream
        del bucket
        main.wait_stream(side)
        reduced.record_stream(main)
        offset = 0
        for p in group:
            n = p.grad.numel()
            p.grad.copy_(reduced[offset:offset + n].view_as(p.grad))
            offset += n
        del reduced


def resnet_job(torch, dev):
    import torchvision
    model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(i):
        x = torch.randn(64, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (64,), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


if __name__ == "__main__":
    sys.exit(main())
