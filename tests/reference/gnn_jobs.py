"""A gnnrt job's model and training in torch, from gnn_reference's layers:
JobModel builds job.proto's Model (as a dict: {"layer": [{"type": "gcn",
"out": 16, ...}, ...], "loss": ...}) with the job's naming (conv1, lin1,
norm1 counted by kind) and defaults; its dropout draws gnnrt's documented
masks (gnn_reference.dropout_mask). Then the optimizer and learning rates
of a job, datasets and parameters as .npy folders, the masked losses, one
train step and the predictions."""
import math
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gnn_reference import GATConv, GCNConv, GINConv, LayerNorm, SAGEConv, dropout_mask, gin_mlp  # noqa: E402


class Context:
    """What a job model's dropout draws from: the job seed and the step."""
    seed = 0
    step = 1


class JobDropout(nn.Module):
    def __init__(self, p: float, key: int, context: Context):
        super().__init__()
        self.p, self.key, self.context = p, key, context

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0:
            return x
        flat = x.reshape(x.size(0), -1)
        mask = dropout_mask(flat.size(0), flat.size(1), self.p, self.context.seed,
                            self.context.step, self.key)
        return (flat * torch.from_numpy(mask).to(x.dtype)).reshape(x.shape)


class JobModel(nn.Module):
    def __init__(self, model: Mapping, in_channels: int, num_classes: int):
        super().__init__()
        self.context = Context()
        self.loss = model.get("loss", "cross_entropy")
        self.steps = []  # (kind, module or None) in order
        width = in_channels
        counts = {"conv": 0, "lin": 0, "norm": 0}

        def named(kind: str, module: nn.Module) -> nn.Module:
            counts[kind] += 1
            setattr(self, f"{kind}{counts[kind]}", module)
            return module

        for i, layer in enumerate(model["layer"]):
            t = layer["type"]
            out = layer.get("out", 0) or num_classes
            key = i + 1  # gnnrt keys a layer's dropout masks by its position
            if t == "dropout":
                self.steps.append(("x", named_step(self, f"dropout{i}", JobDropout(layer.get("p", 0.5), key, self.context))))
            elif t == "relu":
                self.steps.append(("x", nn.ReLU()))
            elif t == "elu":
                self.steps.append(("x", nn.ELU()))
            elif t == "layer_norm":
                self.steps.append(("x", named("norm", LayerNorm(width, layer.get("mode", "graph"),
                                                                layer.get("norm_eps", 1e-5)))))
            elif t == "linear":
                self.steps.append(("x", named("lin", nn.Linear(width, out, bias=layer.get("bias", True)))))
                width = out
            elif t == "gcn":
                self.steps.append(("graph", named("conv", GCNConv(width, out, bias=layer.get("bias", True)))))
                width = out
            elif t == "sage":
                aggr = layer.get("aggr", "mean")
                self.steps.append(("graph", named("conv", SAGEConv(width, out, "max_winner" if aggr == "max" else aggr))))
                width = out
            elif t == "gat":
                heads, concat = layer.get("heads", 1), layer.get("concat", True)
                att = JobDropout(layer.get("attention_dropout", 0.0), key + 1000, self.context)
                conv = GATConv(width, out, heads=heads, concat=concat,
                               negative_slope=layer.get("negative_slope", 0.2),
                               bias=layer.get("bias", True), attention_dropout=att)
                self.steps.append(("graph", named("conv", conv)))
                width = out * heads if concat else out
            elif t == "gin":
                hidden = layer.get("hidden", 0) or out
                self.steps.append(("graph", named("conv", GINConv(gin_mlp(width, hidden, out),
                                                                  eps=layer.get("eps", 0.0),
                                                                  train_eps=layer.get("train_eps", False)))))
                width = out
            else:
                raise ValueError(f"JobModel: unknown layer type {t!r}")
        if width != num_classes:
            raise ValueError(f"JobModel: the last layer gives {width} values, not {num_classes}")
        self.log_softmax = self.loss != "mse"

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for kind, module in self.steps:
            x = module(x, edge_index) if kind == "graph" else module(x)
        return F.log_softmax(x, dim=-1) if self.log_softmax else x


def named_step(model: nn.Module, name: str, module: nn.Module) -> nn.Module:
    setattr(model, name, module)
    return module


def normalize_features(x: Tensor) -> Tensor:
    """PyG's NormalizeFeatures: x - min(x), then each row over its sum (at least 1)."""
    x = x - x.min()
    return x / x.sum(dim=-1, keepdim=True).clamp(min=1.0)


def job_optimizer(opt: Mapping, params) -> torch.optim.Optimizer:
    kind = opt.get("kind", "adam")
    lr, wd = opt.get("lr", 0.01), opt.get("weight_decay", 5e-4)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=opt.get("momentum", 0.0),
                               nesterov=opt.get("nesterov", False), weight_decay=wd)
    betas = (opt.get("beta1", 0.9), opt.get("beta2", 0.999))
    cls = torch.optim.AdamW if kind == "adamw" else torch.optim.Adam
    return cls(params, lr=lr, betas=betas, eps=opt.get("eps", 1e-8), weight_decay=wd)


def job_learning_rates(job: Mapping, steps: int) -> List[float]:
    """The learning rate of each of the first `steps` epochs under the job's
    schedule, from torch.optim.lr_scheduler (StepLR, CosineAnnealingLR to 0
    over the epochs after warm-up, LinearLR warm-up from 1 / warmup_epochs)."""
    s, lr = job.get("schedule", {}), job.get("optimizer", {}).get("lr", 0.01)
    epochs, warmup = s.get("epochs", 200), s.get("warmup_epochs", 0)
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=lr)
    kind = s.get("lr_schedule", "constant")
    if kind == "step":
        main = torch.optim.lr_scheduler.StepLR(opt, step_size=s.get("step_size", 50), gamma=s.get("gamma", 0.5))
    elif kind == "cosine":
        main = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(epochs - warmup, 1), eta_min=0.0)
    else:
        main = torch.optim.lr_scheduler.ConstantLR(opt, factor=1.0, total_iters=0)
    if warmup > 0:
        warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0 / warmup, end_factor=1.0,
                                                 total_iters=max(warmup - 1, 0))
        sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, main], milestones=[warmup])
    else:
        sched = main
    rates = []
    for _ in range(steps):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return rates


@dataclass
class Graph:
    """One data set in the layout of /work/shared/datasets (see its README)."""
    x: Tensor           # float [N, F]
    y: Tensor           # int64 [N]
    edge_index: Tensor  # int64 [2, E]
    train_mask: Tensor  # bool [N]
    val_mask: Tensor
    test_mask: Tensor

    @property
    def num_nodes(self) -> int:
        return self.x.size(0)

    @property
    def num_features(self) -> int:
        return self.x.size(1)

    @property
    def num_classes(self) -> int:
        return int(self.y.max()) + 1

    def to(self, dtype: torch.dtype) -> "Graph":
        """The same graph with x in `dtype` (labels and indices unchanged)."""
        return Graph(self.x.to(dtype), self.y, self.edge_index,
                     self.train_mask, self.val_mask, self.test_mask)


GRAPH_FILES = {"x": np.float32, "y": np.int64, "edge_index": np.int64,
               "train_mask": np.bool_, "val_mask": np.bool_, "test_mask": np.bool_}


def load_dataset(folder: Union[str, Path]) -> Graph:
    folder = Path(folder)
    arrays = {}
    for name, dtype in GRAPH_FILES.items():
        path = folder / f"{name}.npy"
        a = np.load(path)
        if a.dtype != dtype:
            raise ValueError(f"load_dataset: {path} has dtype {a.dtype}, "
                             f"expected {np.dtype(dtype)}")
        arrays[name] = torch.from_numpy(np.ascontiguousarray(a))
    g = Graph(**arrays)
    n = g.x.size(0)
    if g.edge_index.dim() != 2 or g.edge_index.size(0) != 2:
        raise ValueError(f"load_dataset: {folder}/edge_index.npy has shape "
                         f"{tuple(g.edge_index.shape)}, expected [2, E]")
    if g.edge_index.numel() and not (0 <= int(g.edge_index.min()) and int(g.edge_index.max()) < n):
        raise ValueError(f"load_dataset: {folder}/edge_index.npy has ids outside [0, {n})")
    return g


def save_dataset(g: Graph, folder: Union[str, Path]) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, dtype in GRAPH_FILES.items():
        np.save(folder / f"{name}.npy", getattr(g, name).numpy().astype(dtype))


def named_params(model: nn.Module) -> Dict[str, Tensor]:
    """The trainable parameters by PyG name (aliases such as GAT's lin_dst
    and buffers such as GIN's eps are not included)."""
    return {name: p for name, p in model.named_parameters()}


def save_params(params: Union[nn.Module, Mapping[str, Tensor]], folder: Union[str, Path]) -> None:
    """One float32 <name>.npy per parameter, e.g. conv1.lin.weight.npy."""
    if isinstance(params, nn.Module):
        params = named_params(params)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, t in params.items():
        np.save(folder / f"{name}.npy", t.detach().cpu().numpy().astype(np.float32))


def load_params(folder: Union[str, Path]) -> Dict[str, Tensor]:
    folder = Path(folder)
    return {p.name[:-len(".npy")]: torch.from_numpy(np.load(p))
            for p in sorted(folder.glob("*.npy"))}


def assign_params(model: nn.Module, params: Mapping[str, Tensor]) -> None:
    """Copies params into the model (converted to each parameter's dtype);
    the names must match the model's parameters exactly."""
    own = named_params(model)
    missing, extra = sorted(set(own) - set(params)), sorted(set(params) - set(own))
    if missing or extra:
        raise KeyError(f"assign_params: missing {missing}, unexpected {extra}")
    with torch.no_grad():
        for name, p in own.items():
            if tuple(params[name].shape) != tuple(p.shape):
                raise ValueError(f"assign_params: {name} has shape {tuple(params[name].shape)}, "
                                 f"model expects {tuple(p.shape)}")
            p.copy_(params[name])


def masked_mse_loss(out: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    """Mean squared error against one-hot labels over the masked rows (mean
    over rows x classes, as F.mse_loss)."""
    target = F.one_hot(y[mask], out.size(1)).to(out.dtype)
    return F.mse_loss(out[mask], target)


def masked_nll_loss(logits: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    return F.nll_loss(logits[mask], y[mask])


def model_loss(model: nn.Module, g: Graph) -> Tensor:
    """The model's training loss: masked MSE against one-hot labels for a
    model without log_softmax (gcn_mse), masked NLL otherwise."""
    out = model(g.x, g.edge_index)
    if getattr(model, "log_softmax", True) is False:
        return masked_mse_loss(out, g.y, g.train_mask)
    return masked_nll_loss(out, g.y, g.train_mask)


def train_step(model: nn.Module, g: Graph, opt: torch.optim.Optimizer) -> float:
    """One full-graph step in training mode; returns the loss before the update."""
    model.train()
    opt.zero_grad(set_to_none=True)
    loss = model_loss(model, g)
    loss.backward()
    opt.step()
    return loss.item()


def train_steps(model: nn.Module, g: Graph, opt: torch.optim.Optimizer, steps: int) -> List[float]:
    return [train_step(model, g, opt) for _ in range(steps)]


@torch.no_grad()
def predict(model: nn.Module, g: Graph) -> Tensor:
    """log_softmax logits in eval mode (no dropout)."""
    model.eval()
    return model(g.x, g.edge_index)
