"""A small fused and unfused step, and a fused forward without gradients, for
compute-sanitizer (memcheck, racecheck): every kernel (park, the three forwards, backward).

``compute-sanitizer --tool memcheck python3 -m experiments.sanitize_case``
"""

from __future__ import annotations

import torch

import sdtw


def main() -> None:
    for fused, D in ((True, 5), (False, 5), (True, 20)):  # D = 20: two passes of the park
        x = torch.randn(2, 70, D, device="cuda", requires_grad=True)
        y = torch.randn(2, 45, D, device="cuda", requires_grad=True)
        loss = sdtw.softdtw(x, y, gamma=0.1, fused=fused, bandwidth=30, backend="cuda")
        loss.sum().backward()
        with torch.no_grad():
            sdtw.softdtw(x, y, gamma=0.1, fused=fused, bandwidth=30, backend="cuda")
    torch.cuda.synchronize()
    print("sanitizer case ok")


if __name__ == "__main__":
    main()
