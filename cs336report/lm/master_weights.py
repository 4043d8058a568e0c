"""fp32 master weights with bf16 working copies, updated by one AdamW pass per tensor.

Under bf16 autocast a train step keeps every weight in fp32 and converts each weight of a matrix
product to bf16 when the forward uses it (one conversion kernel each), and the bf16 gradient of
that copy back to fp32 in backward (another). :class:`MasterWeightAdamW` computes the same step
without those conversions: the weights autocast would convert become bf16 parameters of the
model (the working copies), their fp32 values stay with the optimizer (the master weights), and
the optimizer step, reading each master weight, bf16 gradient and fp32 moment once, updates the
master and moments and writes the new bf16 working copy in the same pass.

What is computed does not change: autocast finds the working copies already in bf16 and casts
nothing, so the forward runs the same bf16 products on the same bf16 values (a working copy is
its master rounded to bf16, exactly what autocast's cast would make); each such weight is used
once, so its fp32 gradient under autocast is the bf16 gradient widened, which is what the update
reads here; the update is AdamW's (torch.optim.AdamW's defaults, decoupled weight decay) in fp32
on fp32 masters and moments. The weights autocast leaves in fp32 (embedding, norm gains) stay fp32
parameters and get the same update without a copy.

    opt = MasterWeightAdamW(model, probe_tokens, torch.bfloat16, lr=1e-3, compile=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(tokens))
    loss.backward()
    opt.step()          # masters, moments and working copies updated

With ``compile`` the update is one ``torch.compile``d function over all tensors: Inductor fuses
each tensor's update into one kernel (no temporaries), so the step reads 14 and writes 14 bytes
per matrix weight (2 + 4 + 4 + 4 each way: gradient or working copy, master, two moments).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

# torch.optim.AdamW's defaults, which the plain step uses.
DEFAULTS = {"betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}


class _Uses(TorchDispatchMode):
    """Records, per parameter, every operator that receives it as an argument."""

    def __init__(self, params: dict[str, torch.Tensor]):
        super().__init__()
        self.params = params
        self.ptrs = {p.data_ptr(): name for name, p in params.items()}
        self.uses: dict[str, list[tuple]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor) and a.data_ptr() in self.ptrs:
                name = self.ptrs[a.data_ptr()]
                p = self.params[name]
                whole = a.shape == p.shape and a.stride() == p.stride() and a.dtype == p.dtype
                self.uses.setdefault(name, []).append((func, kwargs.get("dtype"), whole))
        return func(*args, **kwargs)


def autocast_cast_weights(model: nn.Module, tokens: torch.Tensor, dtype: torch.dtype) -> list[str]:
    """Names of the parameters that a forward under ``dtype`` autocast only ever converts to ``dtype``.

    One forward on ``tokens`` (under no_grad) runs with a dispatch mode that sees every operator
    and its arguments; a parameter qualifies when each operator that received it converted the
    whole tensor to ``dtype`` (``aten._to_copy``). A parameter also used as is (an embedding
    lookup, a norm gain, a weight tied to one) or through a view is left out: giving it a bf16
    copy would change what those uses compute.
    """
    params = {n: p for n, p in model.named_parameters() if p.dtype == torch.float32}
    mode = _Uses(params)
    with torch.no_grad(), torch.autocast(tokens.device.type, dtype=dtype), mode:
        model(tokens)
    cast = torch.ops.aten._to_copy.default
    return [n for n, uses in mode.uses.items()
            if all(func is cast and to == dtype and whole for func, to, whole in uses)]


def adamw_scalars(step: torch.Tensor, lr: float, beta1: float, beta2: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Count one more step and return AdamW's step size and bias correction for it, as fp32 tensors.

    ``step``: a float64 tensor of one element on the parameters' device (the steps taken so far), so
    nothing here waits for the device; the corrections are computed in float64, as torch.optim
    computes them on the host. They run as a handful of one-element kernels, apart from the update,
    so that no kernel of the update recomputes them per element.
    """
    step.add_(1)
    step_size = (lr / (1 - beta1 ** step)).float()  # (1,)
    bias2_sqrt = (1 - beta2 ** step).sqrt().float()  # (1,)
    return step_size, bias2_sqrt


def adamw_update(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
                 exp_avg_sqs: list[torch.Tensor], working: list[torch.Tensor | None], step_size: torch.Tensor,
                 bias2_sqrt: torch.Tensor, lr: float, beta1: float, beta2: float, eps: float,
                 weight_decay: float) -> None:
    """One AdamW step in place (torch.optim.AdamW's arithmetic), each tensor in one pass.

    ``params``, ``exp_avgs``, ``exp_avg_sqs``: fp32; ``grads``: any float dtype, widened to fp32;
    ``working[i]``: None, or a tensor that receives the updated ``params[i]`` in its own dtype;
    ``step_size``, ``bias2_sqrt``: from :func:`adamw_scalars` for this step.
    """
    for p, g, m, v, w in zip(params, grads, exp_avgs, exp_avg_sqs, working):
        g = g.float()
        p.mul_(1 - lr * weight_decay)
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        denom = (v.sqrt() / bias2_sqrt).add_(eps)
        p.sub_(m / denom * step_size)
        if w is not None:
            w.copy_(p)


class MasterWeightAdamW:
    """AdamW on fp32 master weights that writes the model's bf16 working copies (module docstring).

    Construction replaces, in ``model``, each weight that ``dtype`` autocast converts
    (:func:`autocast_cast_weights`, probed with ``probe_tokens``) by a ``dtype`` parameter holding
    its rounded value; the fp32 tensor becomes the master. The moments are allocated at the first
    step, as torch.optim.AdamW does. ``compile``: run the update through ``torch.compile``.
    """

    def __init__(self, model: nn.Module, probe_tokens: torch.Tensor, dtype: torch.dtype = torch.bfloat16,
                 lr: float = 1e-3, betas: tuple[float, float] = DEFAULTS["betas"], eps: float = DEFAULTS["eps"],
                 weight_decay: float = DEFAULTS["weight_decay"], compile: bool = False):
        names = set(autocast_cast_weights(model, probe_tokens, dtype))
        self.dtype, self.lr, self.betas, self.eps, self.weight_decay = dtype, lr, betas, eps, weight_decay
        self.masters: list[torch.Tensor] = []  # fp32, one per trainable parameter
        self.working: list[nn.Parameter | None] = []  # the model's parameter where it is a copy
        self.grad_of: list[nn.Parameter] = []  # the model parameter whose .grad updates masters[i]
        for name, p in list(model.named_parameters()):
            if not p.requires_grad:
                continue
            if name in names:
                module, attr = _owner(model, name)
                copy = nn.Parameter(p.detach().to(dtype))
                setattr(module, attr, copy)
                self.masters.append(p.detach())
                self.working.append(copy)
                self.grad_of.append(copy)
            else:
                self.masters.append(p.detach())
                self.working.append(None)
                self.grad_of.append(p)
        self.copies = sum(w is not None for w in self.working)
        self.exp_avgs: list[torch.Tensor] = []
        self.exp_avg_sqs: list[torch.Tensor] = []
        self.steps = None
        self._update = torch.compile(adamw_update, fullgraph=True) if compile else adamw_update

    def describe(self) -> dict:
        """What the record keeps about the optimizer."""
        copies = [m for m, w in zip(self.masters, self.working) if w is not None]
        return {"kind": "adamw_master_weights", "working_dtype": str(self.dtype).removeprefix("torch."),
                "working_copies": self.copies, "working_values": sum(m.numel() for m in copies),
                "fp32_only": len(self.masters) - self.copies, "lr": self.lr, "betas": list(self.betas),
                "eps": self.eps, "weight_decay": self.weight_decay,
                "compiled": self._update is not adamw_update}

    @torch.no_grad()
    def step(self) -> None:
        if self.steps is None:
            self.exp_avgs = [torch.zeros_like(m) for m in self.masters]
            self.exp_avg_sqs = [torch.zeros_like(m) for m in self.masters]
            self.steps = torch.zeros(1, dtype=torch.float64, device=self.masters[0].device)
        live = [i for i, p in enumerate(self.grad_of) if p.grad is not None]  # AdamW skips parameters without one
        pick = lambda xs: [xs[i] for i in live]  # noqa: E731
        beta1, beta2 = self.betas
        step_size, bias2_sqrt = adamw_scalars(self.steps, self.lr, beta1, beta2)
        self._update(pick(self.masters), [self.grad_of[i].grad for i in live], pick(self.exp_avgs),
                     pick(self.exp_avg_sqs), pick(self.working), step_size, bias2_sqrt, self.lr, beta1, beta2,
                     self.eps, self.weight_decay)


def _owner(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, attr = name.rpartition(".")
    return (model.get_submodule(path) if path else model), attr
