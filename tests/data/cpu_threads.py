"""Four threads run torch ops (capture must record every thread's ops, not only the main one's)."""

import threading

import torch


def work(n: int) -> None:
    a = torch.randn(32, 32)
    for _ in range(n):
        a = torch.mm(a, a).tanh()


threads = [threading.Thread(target=work, args=(25,)) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("threads done")
