"""The check of a configured model: import its objects, call its factory, run a forward.

:func:`check_source` runs before any cell, in the workflow's first rule (check_student) and
in ``python -m cs336report check-config``: it imports the named objects, checks the factory's
parameters, builds a one-layer ``d_model=16`` instance on the CPU (on the GPU too if that
fails and the run is on CUDA) and runs a forward on 2 x 8 tokens (one import of the user's
package plus a few milliseconds), so a missing module, another signature, a wrong output shape
or an attention/softmax name the model never calls stops the run with a message naming the
key. A cell's process checks its source again where the config named the handout model's
functions only where the checkout may have them (:func:`checked_cell`).
"""

from __future__ import annotations

import json

import torch

from .build import ROLES, _call_factory, _instrumented, package_source
from .model_paths import ModelError, _split, add_paths, check_factory, check_from_paths, resolve

# The instance that check_source builds: every dimension distinct, so a transposed or
# truncated output cannot have the right shape by accident.
PROBE = {"vocab_size": 37, "context_length": 16, "d_model": 16, "num_layers": 1, "num_heads": 2, "d_ff": 32,
         "rope_theta": 10_000.0}


PROBE_TOKENS = (2, 8)  # (batch, seq)


def _probe(factory, path: str, device: str, calls: dict, source: dict):
    """Build the PROBE instance on ``device`` and run it on PROBE_TOKENS; ModelError on failure."""
    call = ", ".join(f"{k}={v}" for k, v in PROBE.items())
    with torch.random.fork_rng(devices=[]), _instrumented(source, calls):
        try:
            model = _call_factory(factory, path, PROBE, device)
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"model.factory: {path}({call}) on {device} raised {type(exc).__name__}: {exc}") from None
        tokens = torch.randint(0, PROBE["vocab_size"], PROBE_TOKENS, device=device)  # (batch, seq)
        try:
            with torch.no_grad():
                return model(tokens)
        except Exception as exc:
            raise ModelError(
                f"model.factory: the forward of {path}({call}) on {device}, on int64 token ids of shape "
                f"{tuple(PROBE_TOKENS)}, raised {type(exc).__name__}: {exc}"
            ) from None


def check_source(model_config: dict | None, device: str = "cpu") -> dict | None:
    """Check a model source as the config resolves it (:func:`cs336report.config.checkout.model_entry`):
    import its objects, call its factory and run a forward; return the source with the optional
    roles the model lacks or never calls dropped, or None for the built-in model.

    The probe model runs on the CPU; if it fails there and ``device`` is CUDA (a model that
    needs a GPU kernel), it is tried on the GPU before giving up. Raises :class:`ModelError`
    naming the key (``model.factory``, ``model.attention`` or ``model.softmax``) and what to
    change.
    """
    model_config = {k: v for k, v in (model_config or {}).items() if v}
    if model_config.get("missing"):  # no model found: the cells that need one are not run
        return model_config
    optional = set(model_config.pop("optional_roles", None) or ())  # roles dropped if the model never calls them
    path = model_config.get("factory")
    if not path:
        for role in ROLES:
            if role in model_config:
                raise ModelError(
                    f"model.{role}: set without model.factory; the built-in model marks its own attention "
                    f"ranges, so name your model's factory too or remove model.{role}"
                )
        return None
    add_paths(model_config.get("paths"))
    factory = resolve(path, "model.factory")
    if not model_config.get("installed"):  # an installed A1 package comes from the environment, not the checkout
        check_from_paths(path, model_config.get("paths"))
    check_factory(factory, path)
    for role in ROLES:
        if role in model_config:
            try:
                resolve(model_config[role], f"model.{role}")
            except ModelError:
                if role not in optional:
                    raise
                del model_config[role]  # the handout model's function, which this model does not have
    call = ", ".join(f"{k}={v}" for k, v in PROBE.items())
    calls: dict[str, int] = {}
    try:
        out = _probe(factory, path, "cpu", calls, model_config)
    except ModelError as cpu_error:
        if not (device.startswith("cuda") and torch.cuda.is_available()):
            raise
        calls.clear()
        try:
            out = _probe(factory, path, device, calls, model_config)
        except ModelError as gpu_error:
            raise ModelError(f"{cpu_error}; and on {device}: {str(gpu_error).split(': ', 1)[1]}") from None
    want = (*PROBE_TOKENS, PROBE["vocab_size"])
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != want or not out.is_floating_point():
        got = f"shape {tuple(out.shape)}, dtype {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise ModelError(
            f"model.factory: {path}({call}) maps token ids of shape {tuple(PROBE_TOKENS)} to {got}; expected "
            f"floating-point logits of shape (batch, seq, vocab_size) = {want}: the model's forward must "
            f"return one logits tensor (apply the output projection, do not return hidden states or a tuple)"
        )
    for role in ROLES:
        if role in model_config and not calls.get(role) and role in optional:
            del model_config[role]
        elif role in model_config and not calls.get(role):
            raise ModelError(
                f"model.{role}: {model_config[role]} was not called during a forward of {path}; name the function "
                f"the model actually calls (its module attribute, e.g. 'package.module:function'), or remove "
                f"model.{role}"
            )
    module_name = _split(path, "model.factory")[0]
    return {**model_config, "sha256_16": package_source(module_name)["sha256_16"]}


_CHECKED: dict[tuple[str, str], dict | None] = {}


def checked_cell(cell: dict) -> dict:
    """``cell`` with its model source as the model's check leaves it: the handout model's
    functions that the config names only where the checkout may have them (``optional_roles``,
    :func:`cs336report.config.checkout.model_entry`) are dropped where the model lacks or never
    calls them. The check runs once a process for a source; a cell without optional roles is
    returned as it is."""
    source = cell.get("model_source")
    if not source or "optional_roles" not in source:
        return cell
    device = str(cell.get("device", "cpu"))
    key = (json.dumps(source, sort_keys=True), device)
    if key not in _CHECKED:
        _CHECKED[key] = check_source(source, device)
    return {**cell, "model_source": _CHECKED[key]}
