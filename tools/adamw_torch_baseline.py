#!/usr/bin/env python3
"""adamw_torch_baseline.py: times PyTorch's own AdamW doing the step that
hbm_adamw_step_cuda does (BF16 weights and gradients, FP32 master, m and v),
the baseline for tools/gpu_check_adamw.sh's figures. Needs torch with CUDA.

  python3 tools/adamw_torch_baseline.py [--params N] [--tensors K]

A mixed-precision step as frameworks run it: the BF16 gradients cast into the
FP32 .grad (one foreach copy), AdamW on the FP32 master (fused=True; then
foreach=True), and the master copied back to the BF16 weight. Also the fused AdamW call alone, gradients
already FP32 (the least PyTorch can do). Best and median of 20 after 3
warm-ups, CUDA events, for one tensor of N parameters and for the same N as K
tensors. One JSON line at the end. Exit 77 without a usable CUDA device.
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=int, default=512 << 20)
    ap.add_argument("--tensors", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print("adamw_torch_baseline: no torch: %s" % e)
        return 77
    if not torch.cuda.is_available():
        print("adamw_torch_baseline: no usable CUDA device")
        return 77
    results = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "params": args.params}
    for k in (1, args.tensors):
        sizes = [args.params // k] * k
        sizes[-1] += args.params - sum(sizes)
        masters = [torch.randn(s, device="cuda") for s in sizes]
        weights = [m.to(torch.bfloat16) for m in masters]
        grads = [torch.randn(s, device="cuda", dtype=torch.bfloat16) * 1e-3 for s in sizes]
        params = [torch.nn.Parameter(m) for m in masters]
        for p, g in zip(params, grads):
            p.grad = g.float()
        fp32_grads = [p.grad for p in params]
        for mode in ("fused", "foreach"):
            opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                    **{mode: True})

            def full_step():
                torch._foreach_copy_(fp32_grads, grads)  # the BF16 gradients into the FP32 .grad
                opt.step()
                with torch.no_grad():
                    torch._foreach_copy_(weights, [p.detach() for p in params])

            best, median = time_it(torch, full_step, args.reps)
            results["%s_%d_tensor%s_ms" % (mode, k, "" if k == 1 else "s")] = {"best": best, "median": median}
            if mode == "fused":
                best, median = time_it(torch, opt.step, args.reps)
                results["fused_step_only_%d_tensor%s_ms" % (k, "" if k == 1 else "s")] = {"best": best, "median": median}
            del opt
        del masters, weights, grads, params, fp32_grads
        torch.cuda.empty_cache()
    for key, v in results.items():
        if isinstance(v, dict):
            print("%-34s best %8.3f ms  median %8.3f ms  (%.0f GB/s at hbm's 28 B per parameter)" % (
                key, v["best"], v["median"], 28 * args.params / v["best"] / 1e6))
    print(json.dumps(results))
    return 0


def time_it(torch, fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[0], times[len(times) // 2]


if __name__ == "__main__":
    sys.exit(main())
