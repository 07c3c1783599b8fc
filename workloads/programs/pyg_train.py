"""A torch-geometric graph-classification training loop, as PyG's examples (gin.py,
mutag_gin.py) write it: a GIN with `global_add_pool` over mini-batches of small graphs
from `torch_geometric.loader.DataLoader`, Adam, and the examples' running loss
`total_loss += float(loss) * data.num_graphs`. The graphs are `FakeDataset` graphs
(TU-dataset sized: ~40 nodes, 64 features) since nothing can be downloaded.

    python workloads/programs/pyg_train.py [--batch-size 128] [--workers 0]
        [--hidden 128] [--epochs 1] [--compile]
"""

import argparse

import torch
import torch.nn.functional as F
from torch_geometric.datasets import FakeDataset
from torch_geometric.loader import DataLoader
from torch_geometric.nn import MLP, GINConv, global_add_pool


class GIN(torch.nn.Module):
    def __init__(self, in_channels: int, hidden: int, out_channels: int, num_layers: int) -> None:
        super().__init__()
        self.convs = torch.nn.ModuleList()
        for _ in range(num_layers):
            self.convs.append(GINConv(MLP([in_channels, hidden, hidden])))
            in_channels = hidden
        self.mlp = MLP([hidden, hidden, out_channels], norm=None, dropout=0.5)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = conv(x, edge_index).relu()
        return self.mlp(global_add_pool(x, batch))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--graphs", type=int, default=8000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--compile", action="store_true")
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset = FakeDataset(
        num_graphs=args.graphs, avg_num_nodes=40, avg_degree=4, num_channels=64, num_classes=10, task="graph"
    )
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    model = GIN(dataset.num_features, args.hidden, dataset.num_classes, num_layers=5).to(device)
    if args.compile:
        model = torch.compile(model, dynamic=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    for epoch in range(1, args.epochs + 1):
        model.train()
        total_loss = 0.0
        for data in loader:
            data = data.to(device)
            optimizer.zero_grad()
            out = model(data.x, data.edge_index, data.batch)
            loss = F.cross_entropy(out, data.y)
            loss.backward()
            optimizer.step()
            total_loss += float(loss) * data.num_graphs
        print(f"epoch {epoch:03d} loss {total_loss / len(loader.dataset):.4f}")


if __name__ == "__main__":
    main()
