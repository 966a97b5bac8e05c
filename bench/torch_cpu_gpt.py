#!/usr/bin/env python3
"""Minimal GPT (nanoGPT-like) CPU training peer for llmplan's executor.

Model: token + learned position embedding, N pre-LN blocks
(LN -> causal MHA -> residual, LN -> GELU MLP(4H) -> residual), final LN,
LM head tied to the token embedding. fp32, AdamW, no dropout, biases on.

Prints one JSON object to stdout (progress goes to stderr).

Run with Debian's torch (python3-torch 1.13, CPU):
    /usr/bin/python3 torch_cpu_gpt.py --layers 4 --hidden 256 --heads 4 --seq 256 --batch 8 --vocab 8192 --steps 25 --warmup 5 --threads 2
    /usr/bin/python3 torch_cpu_gpt.py --layers 12 --hidden 768 --heads 12 --seq 512 --batch 4 --vocab 50257 --steps 6 --warmup 2 --threads 2 [--recompute]
Numbers measured with it beside bench_executor: see the README (Benchmarks).

Timing: each training step is split into fwd (incl. loss), bwd, opt
(AdamW step + zero_grad); CPU execution is synchronous so perf_counter
brackets are exact. tokens/s = batch*seq / step_time, median over the
steps after --warmup. A separate forward-only pass (torch.no_grad) is
timed after training unless --fwd-steps 0.

Shared machines: every step also records the share of all CPUs used by
other processes (/proc/stat busy time minus our own CPU time); *_clean
medians only use steps where that share is < 5%.

On 2 cores, OMP_WAIT_POLICY=PASSIVE avoids OpenMP workers spinning against
OpenBLAS's pthreads (large slowdowns as soon as anything else runs).

peak_rss_* come from resource.getrusage(RUSAGE_SELF).ru_maxrss, which is
the lifetime high-water mark of the process: compare activation memory
(e.g. --recompute vs not) across separate processes, not within one.
"""
import argparse
import json
import math
import os
import platform
import resource
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--steps", type=int, default=20,
                   help="total training steps (incl. warmup)")
    p.add_argument("--warmup", type=int, default=2,
                   help="steps excluded from medians")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--fwd-steps", type=int, default=3,
                   help="extra forward-only (no_grad) iterations after training, "
                        "first one is warmup; 0 disables")
    p.add_argument("--recompute", action="store_true",
                   help="activation checkpointing per block "
                        "(torch.utils.checkpoint, use_reentrant=False)")
    p.add_argument("--data", choices=["random", "pattern", "bytes"], default="random",
                   help="random: uniform tokens, fresh batch every step; "
                        "pattern: t_i=(a+i*b) mod V with random a,b per row (learnable); "
                        "bytes: byte-level windows of --data-file (vocab forced >=256)")
    p.add_argument("--data-file", default="/usr/share/common-licenses/GPL-3")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", default=None, help="also write the JSON here")
    return p.parse_args()


ARGS = parse_args()
# Must be set before torch (and its OpenBLAS / OpenMP runtimes) is loaded.
# Debian's torch does its fp32 GEMMs through libblas.so.3 -> OpenBLAS
# (pthread variant), whose thread count torch.set_num_threads() does NOT
# control; OMP_NUM_THREADS covers ATen's elementwise/softmax/layernorm kernels.
os.environ.setdefault("OMP_NUM_THREADS", str(ARGS.threads))
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(ARGS.threads))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.utils.checkpoint as ckpt  # noqa: E402


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def rss_now_mib():
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def sys_busy_s():
    """System-wide busy CPU seconds (all CPUs) from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_s():
    t = os.times()
    return t.user + t.system


NCPU = os.cpu_count() or 1
CLEAN_FOREIGN = 0.05  # a step is "clean" if other processes used <5% of all CPUs


def rss_peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


class CausalSelfAttention(nn.Module):
    def __init__(self, h, nh, seq):
        super().__init__()
        assert h % nh == 0
        self.nh, self.hd = nh, h // nh
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        mask = torch.tril(torch.ones(seq, seq, dtype=torch.bool)).view(1, 1, seq, seq)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.nh, self.hd).transpose(1, 2)  # B nh T hd
        k = k.view(B, T, self.nh, self.hd).transpose(1, 2)
        v = v.view(B, T, self.nh, self.hd).transpose(1, 2)
        # torch 1.13 has no F.scaled_dot_product_attention: explicit T x T scores
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, h):
        super().__init__()
        self.fc = nn.Linear(h, 4 * h)
        self.proj = nn.Linear(4 * h, h)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))  # exact (erf) GELU


class Block(nn.Module):
    def __init__(self, h, nh, seq):
        super().__init__()
        self.ln1 = nn.LayerNorm(h)
        self.attn = CausalSelfAttention(h, nh, seq)
        self.ln2 = nn.LayerNorm(h)
        self.mlp = MLP(h)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class GPT(nn.Module):
    def __init__(self, L, h, nh, seq, vocab, recompute=False):
        super().__init__()
        self.recompute = recompute
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(seq, h)
        self.blocks = nn.ModuleList([Block(h, nh, seq) for _ in range(L)])
        self.ln_f = nn.LayerNorm(h)
        self.lm_head = nn.Linear(h, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self._init)
        for n, p in self.named_parameters():  # GPT-2 scaled residual init
            if n.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            if self.recompute and torch.is_grad_enabled():
                x = ckpt.checkpoint(blk, x, use_reentrant=False)
            else:
                x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def make_batch_fn(a, gen):
    B, T, V = a.batch, a.seq, a.vocab
    if a.data == "random":
        def fn():
            d = torch.randint(0, V, (B, T + 1), generator=gen)
            return d[:, :-1].contiguous(), d[:, 1:].contiguous()
    elif a.data == "pattern":
        ar = torch.arange(T + 1).view(1, -1)

        def fn():
            start = torch.randint(0, V, (B, 1), generator=gen)
            stride = torch.randint(1, 17, (B, 1), generator=gen)
            d = (start + ar * stride) % V
            return d[:, :-1].contiguous(), d[:, 1:].contiguous()
    else:
        with open(a.data_file, "rb") as f:
            raw = torch.tensor(list(f.read()), dtype=torch.long)
        assert raw.numel() > T + 1, "data file too small"

        def fn():
            off = torch.randint(0, raw.numel() - T - 1, (B,), generator=gen)
            d = torch.stack([raw[o:o + T + 1] for o in off.tolist()])
            return d[:, :-1].contiguous(), d[:, 1:].contiguous()
    return fn


def analytic(a, n_params):
    """Matmul FLOPs per token (fwd = 2*N_matmul + attention; train = 3x fwd)."""
    L, h, T, V = a.layers, a.hidden, a.seq, a.vocab
    n_matmul = L * 12 * h * h + V * h  # block linears + LM head (tied wte)
    attn_fwd = L * 4 * T * h  # QK^T + AV per token, full T x T (mask applied after matmul)
    fwd = 2 * n_matmul + attn_fwd
    return {"params": n_params, "matmul_params": n_matmul,
            "fwd_flops_per_token": fwd, "train_flops_per_token": 3 * fwd,
            "state_bytes_param_grad_adam": 16 * n_params}


def med(xs):
    return statistics.median(xs) if xs else None


def main():
    a = ARGS
    if a.data == "bytes":
        a.vocab = max(a.vocab, 256)
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    gen = torch.Generator().manual_seed(a.seed + 1)
    rss0 = rss_now_mib()

    model = GPT(a.layers, a.hidden, a.heads, a.seq, a.vocab, a.recompute)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())  # tied weight counted once
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    get_batch = make_batch_fn(a, gen)
    rss_model = rss_now_mib()
    ana = analytic(a, n_params)
    tok = a.batch * a.seq
    log(f"params={n_params/1e6:.2f}M tokens/step={tok} "
        f"train_GFLOP/step={ana['train_flops_per_token']*tok/1e9:.1f}")

    load_start = os.getloadavg()
    fwd_t, bwd_t, opt_t, step_t, cpu_t, losses = [], [], [], [], [], []
    foreign_t = []  # per-step share of all CPUs used by OTHER processes (shared machine)
    for s in range(a.steps):
        x, y = get_batch()
        if s == min(a.warmup, max(a.steps - 1, 0)):  # start of measured window
            win0 = (time.perf_counter(), sys_busy_s(), own_cpu_s())
        c0 = time.process_time()  # all threads of this process
        b0, o0 = sys_busy_s(), own_cpu_s()
        t0 = time.perf_counter()
        loss = model(x, y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        cpu_t.append(time.process_time() - c0)
        ff = ((sys_busy_s() - b0) - (own_cpu_s() - o0)) / ((t3 - t0) * NCPU)
        foreign_t.append(max(ff, 0.0))
        lv = loss.item()
        losses.append(lv)
        fwd_t.append(t1 - t0); bwd_t.append(t2 - t1); opt_t.append(t3 - t2); step_t.append(t3 - t0)
        log(f"step {s:4d} loss {lv:.4f} fwd {1e3*(t1-t0):8.1f} ms bwd {1e3*(t2-t1):8.1f} ms "
            f"opt {1e3*(t3-t2):7.1f} ms  {tok/(t3-t0):8.0f} tok/s  peakRSS {rss_peak_mib():.0f} MiB"
            f"  foreign {foreign_t[-1]:.2f}")
    peak_train = rss_peak_mib()
    wall = time.perf_counter() - win0[0]
    foreign = (sys_busy_s() - win0[1]) - (own_cpu_s() - win0[2])
    ncpu = os.cpu_count() or 1

    w = min(a.warmup, max(a.steps - 1, 0))
    m_step, m_fwd, m_bwd, m_opt = step_t[w:], fwd_t[w:], bwd_t[w:], opt_t[w:]
    m_cpu = cpu_t[w:]
    m_for = foreign_t[w:]
    clean = [i for i, f in enumerate(m_for) if f < CLEAN_FOREIGN]
    tps_clean = [tok / m_step[i] for i in clean]
    tps = [tok / t for t in m_step]

    fwd_only, fwd_only_foreign = [], []
    if a.fwd_steps > 0:
        model.eval()
        with torch.no_grad():
            for _ in range(a.fwd_steps):
                x, y = get_batch()
                b0, o0 = sys_busy_s(), own_cpu_s()
                t0 = time.perf_counter()
                model(x, y)
                dt = time.perf_counter() - t0
                fwd_only.append(dt)
                fwd_only_foreign.append(max(((sys_busy_s() - b0) - (own_cpu_s() - o0)) / (dt * NCPU), 0.0))
    fo = fwd_only[1:] if len(fwd_only) > 1 else fwd_only

    ms = lambda v: None if v is None else round(1e3 * v, 2)  # noqa: E731
    med_step = med(m_step)
    res = {
        "config": {k: getattr(a, k) for k in
                   ["layers", "hidden", "heads", "seq", "batch", "vocab", "steps",
                    "warmup", "threads", "recompute", "data", "lr", "seed"]},
        "env": {"torch": torch.__version__, "python": platform.python_version(),
                "torch_threads": torch.get_num_threads(),
                "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
                "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
                "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY"),
                "cpu": platform.processor() or platform.machine()},
        "model": ana,
        "tokens_per_step": tok,
        "tokens_per_s_median": round(med(tps), 1),
        "tokens_per_s_min": round(min(tps), 1),
        "tokens_per_s_max": round(max(tps), 1),
        "step_ms_median": ms(med_step),
        "fwd_ms_median": ms(med(m_fwd)),
        "bwd_ms_median": ms(med(m_bwd)),
        "opt_ms_median": ms(med(m_opt)),
        "fwd_bwd_ms_median": ms(med([f + b for f, b in zip(m_fwd, m_bwd)])),
        "bwd_over_fwd": round(med(m_bwd) / med(m_fwd), 3),
        "fwd_only_nograd_ms_median": ms(med(fo)),
        "fwd_only_foreign_frac": [round(f, 2) for f in fwd_only_foreign[1:]],
        "train_gflops_achieved": round(ana["train_flops_per_token"] * tok / med_step / 1e9, 2),
        "step_cpu_ms_median": ms(med(m_cpu)),
        "cpu_util_median": round(med([c / t for c, t in zip(m_cpu, m_step)]), 3),
        "measured_steps": len(m_step),
        "foreign_cpu_frac_steps": [round(f, 2) for f in m_for],
        "clean_steps": len(clean),
        "tokens_per_s_median_clean": round(med(tps_clean), 1) if clean else None,
        "step_ms_median_clean": ms(med([m_step[i] for i in clean])) if clean else None,
        "fwd_ms_median_clean": ms(med([m_fwd[i] for i in clean])) if clean else None,
        "bwd_ms_median_clean": ms(med([m_bwd[i] for i in clean])) if clean else None,
        "opt_ms_median_clean": ms(med([m_opt[i] for i in clean])) if clean else None,
        "foreign_cpu_frac": round(max(foreign, 0.0) / (wall * ncpu), 3),
        "loadavg_start": [round(v, 2) for v in load_start],
        "loadavg_end": [round(v, 2) for v in os.getloadavg()],
        "loss_first": round(losses[0], 4),
        "loss_last": round(losses[-1], 4),
        "ln_vocab": round(math.log(a.vocab), 4),
        "rss_start_mib": round(rss0, 1),
        "rss_after_init_mib": round(rss_model, 1),
        "peak_rss_train_mib": round(peak_train, 1),
        "peak_rss_end_mib": round(rss_peak_mib(), 1),
    }
    out = json.dumps(res, indent=2)
    print(out)
    if a.out:
        with open(a.out, "w") as f:
            f.write(out + "\n")


if __name__ == "__main__":
    main()
