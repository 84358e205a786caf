"""A Triton kernel JIT-compiled at run time, launched from PyTorch:

    python3 triton_add.py

Triton writes line information of this file into the kernel's cubin, so a
report attributes the kernel's loads and stores to the lines below.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, 2.0 * x + y, mask=mask)


def main():
    n = 1 << 24
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    grid = (triton.cdiv(n, 1024),)
    for _ in range(50):
        axpy_kernel[grid](x, y, out, n, BLOCK=1024)
    torch.cuda.synchronize()
    ok = torch.allclose(out, 2.0 * x + y)
    print(f"RESULT name=triton_axpy n={n} ok={int(ok)}", flush=True)


if __name__ == "__main__":
    main()
