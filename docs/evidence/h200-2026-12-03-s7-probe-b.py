# Run on the H200, 2026-12-03 08:10 UTC, exactly as below (its output: ...-s7-probe.txt, after "---"):
#   python3 docs/evidence/h200-2026-12-03-s7-probe-b.py
# torch.compile's shape policy: each function sees the decode shape first, then prefill.
import torch
from triton.testing import do_bench
xp=torch.randn(32768,4096,dtype=torch.bfloat16,device='cuda'); xd=torch.randn(64,128256,dtype=torch.bfloat16,device='cuda')
lp=torch.randn(8192,8192,dtype=torch.bfloat16,device='cuda'); ld=torch.randn(32,8192,dtype=torch.bfloat16,device='cuda')
ln=torch.nn.LayerNorm(8192,device='cuda',dtype=torch.bfloat16)
def t(fn): return f"{do_bench(fn,warmup=50,rep=300)*1e3:.1f} us"
for dyn in [None, False]:
    torch._dynamo.reset()
    cs=torch.compile(lambda a: torch.softmax(a,-1), dynamic=dyn); cs(xd); cs(xp)
    cl=torch.compile(ln, dynamic=dyn); cl(ld); cl(lp)
    print("dynamic",dyn,"softmax prefill",t(lambda: cs(xp)),"decode",t(lambda: cs(xd)),"| layernorm prefill",t(lambda: cl(lp)),"decode",t(lambda: cl(ld)))
print("eager softmax decode",t(lambda: torch.softmax(xd,-1)),"layernorm decode",t(lambda: ln(ld)), "layernorm prefill", t(lambda: ln(lp)))
