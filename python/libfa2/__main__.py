"""python -m libfa2: what is installed, and whether it works here.

Prints the library's build, the GPU, the plan of a sample problem, then runs a small
forward on the GPU and checks it against a float64 reference. Exit status: 0 checked
and correct; 1 the check failed; 2 libfa2.so not found or not loadable; 77 nothing to
check here (no GPU, or no torch), said plainly.
"""
import sys

EXIT_OK, EXIT_FAILED, EXIT_NO_LIBRARY, EXIT_NOT_CHECKED = 0, 1, 2, 77

# The sample: bf16, GQA 8:2, head dim 128, causal with seqlen_q < seqlen_k (bottom-right).
BATCH, SEQLEN_Q, SEQLEN_K, HEADS_Q, HEADS_KV, HEAD_DIM = 2, 257, 300, 8, 2, 128
MAX_REL_L2 = 1e-2  # bf16 rounds O alone to ~4e-3 of a float64 reference


def _describe_plan(fa2, device):
    problem = fa2.make_problem("bf16", (BATCH, SEQLEN_Q, HEADS_Q, HEAD_DIM),
                               (BATCH, SEQLEN_K, HEADS_KV, HEAD_DIM), causal=True)
    p = fa2.plan(problem, device)
    kernel = "Hopper wgmma" if p.fwd_arch == 90 else "mma.sync"
    return (f"plan: {kernel} forward, Br={p.block_m} Bc={p.block_n}, {p.warps} warps, "
            f"{p.grid_blocks} blocks, {p.smem_bytes} B shared memory")


def _reference(q, k, v):
    """Causal GQA attention in float64, bottom-right aligned: (o, lse)."""
    import torch
    group = HEADS_Q // HEADS_KV
    qd, kd, vd = (t.double().transpose(1, 2) for t in (q, k, v))  # [b, h, s, d]
    kd, vd = kd.repeat_interleave(group, 1), vd.repeat_interleave(group, 1)
    s = qd @ kd.transpose(-1, -2) / HEAD_DIM ** 0.5
    rows = torch.arange(SEQLEN_Q, device=q.device).view(-1, 1)
    cols = torch.arange(SEQLEN_K, device=q.device).view(1, -1)
    s = s.masked_fill(cols > rows + (SEQLEN_K - SEQLEN_Q), float("-inf"))
    lse = torch.logsumexp(s, -1)
    return (torch.softmax(s, -1) @ vd).transpose(1, 2), lse


def _check_on_gpu(fa2):
    import torch
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(BATCH, SEQLEN_Q, HEADS_Q, HEAD_DIM, device="cuda", generator=gen)
    k = torch.randn(BATCH, SEQLEN_K, HEADS_KV, HEAD_DIM, device="cuda", generator=gen)
    v = torch.randn(BATCH, SEQLEN_K, HEADS_KV, HEAD_DIM, device="cuda", generator=gen)
    q, k, v = (t.bfloat16() for t in (q, k, v))
    o, lse = fa2.forward(q, k, v, causal=True, return_lse=True)
    torch.cuda.synchronize()
    o_ref, lse_ref = _reference(q, k, v)
    rel = ((o.double() - o_ref).norm() / o_ref.norm()).item()
    lse_err = (lse.double() - lse_ref).abs().max().item()
    ok = rel <= MAX_REL_L2 and lse_err <= 1e-3
    print(f"check: forward bf16 [{BATCH}, {SEQLEN_Q}, {HEADS_Q}, {HEAD_DIM}] against "
          f"[{BATCH}, {SEQLEN_K}, {HEADS_KV}, {HEAD_DIM}] causal: O rel. L2 error {rel:.2e} "
          f"(limit {MAX_REL_L2:.0e}), LSE max error {lse_err:.2e} (limit 1e-03): "
          f"{'PASS' if ok else 'FAIL'}")
    return EXIT_OK if ok else EXIT_FAILED


def main():
    import libfa2 as fa2
    try:
        lib = fa2.library()
    except fa2.Fa2LibraryNotFound as e:
        print(f"libfa2 {fa2.__version__} (Python package): {e}")
        return EXIT_NO_LIBRARY
    print(lib.build_info())
    print(f"library: {lib.path}")
    try:
        info = lib.device_info(0)
    except fa2.Fa2Error as e:
        print(f"GPU: none ({e.message})")
        h100 = fa2.make_device_info(9, 0, 132, 232448, 233472)
        print(f"{_describe_plan(fa2, h100)} (for an H100, planned on this CPU)")
        print("not checked: no GPU here, so no forward was run")
        return EXIT_NOT_CHECKED
    print(f"GPU 0: sm_{info.cc_major}{info.cc_minor}, {info.sm_count} SMs, "
          f"{info.smem_per_block_optin // 1024} KiB shared memory per block")
    print(_describe_plan(fa2, info))
    try:
        import torch  # noqa: F401
    except ImportError:
        print("not checked: the GPU check uses PyTorch, which is not installed here")
        return EXIT_NOT_CHECKED
    return _check_on_gpu(fa2)


if __name__ == "__main__":
    sys.exit(main())
