"""The model the view tests show: two linear layers that every target takes, then a rank-5 stretch that the GPU
and NPU rules leave on the CPU (two partitions), every op compared layer by layer."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 5)

    def forward(self, x):
        z = self.fc2(torch.relu(self.fc1(x)))
        w = torch.sigmoid(z.reshape(1, 5, 1, 1, 1) * 2.0)  # RANK5_LINE
        return w.reshape(1, 5) + z


def build():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(1, 8),)
