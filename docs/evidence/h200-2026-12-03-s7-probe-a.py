# Run on the H200, 2026-12-03 08:09 UTC, exactly as below (its output: ...-s7-probe.txt, first block):
#   python3 docs/evidence/h200-2026-12-03-s7-probe-a.py
# Byte counts are read + write of the bf16 tensors.
import torch, triton
from triton.testing import do_bench
x=torch.randn(32768,4096,dtype=torch.bfloat16,device='cuda')
g=torch.randn(8192,14336,dtype=torch.bfloat16,device='cuda')
ln=torch.nn.LayerNorm(8192,device='cuda',dtype=torch.bfloat16); l=torch.randn(8192,8192,dtype=torch.bfloat16,device='cuda')
buf=torch.empty(256<<20,dtype=torch.uint8,device='cuda')
def t(fn,nb): 
    ms=do_bench(fn,warmup=50,rep=300); return f"{ms*1e3:.1f} us  {nb/ms/1e9:.2f} TB/s"
print("copy", t(lambda: x.clone(), 2*x.numel()*2))
print("softmax prefill", t(lambda: torch.softmax(x,-1), 2*x.numel()*2))
print("gelu prefill", t(lambda: torch.nn.functional.gelu(g,approximate='tanh'), 2*g.numel()*2))
print("layernorm prefill", t(lambda: ln(l), 2*l.numel()*2))
cs=torch.compile(lambda a: torch.softmax(a,-1)); cs(x)
print("compiled softmax prefill", t(lambda: cs(x), 2*x.numel()*2))
s,e=torch.cuda.Event(True),torch.cuda.Event(True)
for name,fn in [("softmax",lambda: torch.softmax(x,-1)),("gelu",lambda: torch.nn.functional.gelu(g,approximate='tanh'))]:
    r=[]
    for i in range(20):
        buf.zero_(); torch.cuda.synchronize(); s.record(); fn(); e.record(); torch.cuda.synchronize(); r.append(s.elapsed_time(e)*1e3)
    r.sort(); print(name,"after flush+sync median",f"{r[10]:.1f} us")
