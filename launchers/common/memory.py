"""The memory calculator of notebook 01: bytes each device holds during one training step.

Pure functions (no torch, no hardware), so that tests and the notebook's slider panel can
call them. The notebook explains every term and checks the numbers against the ledger of
its DataParallel re-implementation; read it there (it prints this file's functions).

The step, phase by phase, as ``nn.DataParallel`` runs it over K devices (device 0 holds the
model, the optimizer and the batch; chunk k has ``c_k`` samples, as ``torch.chunk`` splits):

=============  =====================================================  =======================
phase          device 0                                               device k > 0
=============  =====================================================  =======================
scatter        weights + optimizer state + whole batch (+ labels)     + its input chunk
replicate      (its replica is the model itself)                      + a copy of the weights
forward        + its activations and outputs                          + its activations, outputs
gather         + the gathered outputs (a copy, K > 1 only)
loss           + what the loss saves + the outputs' gradient
scatter_grads  - gathered outputs, loss buffers                       + its outputs' gradient
backward       + gradients                                            + gradients of its replica
reduce         - activations; + one replica's gradients received      - activations
step           - the received gradients                               - everything
=============  =====================================================  =======================

With one device, DataParallel calls the module directly: nothing to replicate, gather or
reduce, and the calculator (like torch) adds nothing for those phases.
"""

from __future__ import annotations

import math

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
# tensors of the size of the parameters that each optimizer keeps
OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "adam": 2}


def _check(name: str, value, minimum: float = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= minimum:
        raise ValueError(f"{name}={value!r}: use a number >= {minimum}")


def chunk_sizes(batch: int, devices: int) -> list[int]:
    """Samples per device, as ``torch.chunk`` (and so DataParallel's scatter) splits a batch.

    ``torch.chunk`` makes chunks of ceil(batch / devices): the last devices may get fewer
    samples, or none at all (batch 5 over 4 devices: 2, 2, 1, 0).
    """
    _check("batch", batch, 1)
    _check("devices", devices, 1)
    size = math.ceil(batch / devices)
    return [max(0, min(size, batch - k * size)) for k in range(devices)]


def _sizes(params, dtype, optimizer):
    _check("params", params, 0)
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype={dtype!r}: use one of {', '.join(DTYPE_BYTES)}")
    if optimizer not in OPTIMIZER_STATES:
        raise ValueError(f"optimizer={optimizer!r}: use one of {', '.join(OPTIMIZER_STATES)}")
    weights = params * DTYPE_BYTES[dtype]
    return DTYPE_BYTES[dtype], weights, OPTIMIZER_STATES[optimizer] * weights


def dp_phases(
    params: int,
    batch: int,
    devices: int,
    *,
    dtype: str = "float32",
    optimizer: str = "momentum",
    activation_bytes_per_sample: float = 0,
    output_size: int = 1,
    input_size: int = 0,
    label_bytes_per_sample: int = 0,
) -> dict[str, list[float]]:
    """Bytes held by each device at the end of each phase of one DataParallel step.

    ``params``: parameter count; ``output_size`` / ``input_size``: elements per sample;
    ``activation_bytes_per_sample``: what autograd keeps for backward, per sample, beyond
    the input; ``label_bytes_per_sample``: the targets (they stay on device 0).
    """
    b, weights, state = _sizes(params, dtype, optimizer)
    _check("activation_bytes_per_sample", activation_bytes_per_sample)
    _check("output_size", output_size)
    _check("input_size", input_size)
    _check("label_bytes_per_sample", label_bytes_per_sample)
    chunks = chunk_sizes(batch, devices)
    x, o, a = input_size * b, output_size * b, activation_bytes_per_sample
    split = devices > 1  # with one device DataParallel calls the module directly

    held = [0.0] * devices
    phases: dict[str, list[float]] = {}

    def snapshot(name):
        phases[name] = list(held)

    # scatter: device 0 has weights, optimizer state, the whole batch and the labels;
    # the others receive their chunk of the input
    held[0] = weights + state + batch * (x + label_bytes_per_sample)
    for k in range(1, devices):
        held[k] += chunks[k] * x
    snapshot("scatter")
    for k in range(1, devices):  # replicate: a copy of the weights, on every forward
        held[k] += weights if chunks[k] else 0
    snapshot("replicate")
    for k in range(devices):  # forward: each replica's activations and outputs
        held[k] += chunks[k] * (a + o)
    snapshot("forward")
    gathered = batch * o if split else 0  # gather: a copy of every output on device 0
    held[0] += gathered
    snapshot("gather")
    held[0] += 2 * batch * o  # loss: what it saves for backward + the outputs' gradient
    snapshot("loss")
    held[0] -= gathered + batch * o  # those freed; the gradient goes back out in chunks
    for k in range(1, devices):
        held[k] += chunks[k] * o
    snapshot("scatter_grads")
    for k in range(devices):  # backward: gradients of every replica
        held[k] += weights if chunks[k] else 0
    snapshot("backward")
    for k in range(devices):  # activations, outputs and their gradients are freed
        held[k] -= chunks[k] * (a + o) + (chunks[k] * o if k else 0)
    held[0] -= batch * o
    # reduce: device 0 receives one replica's gradients at a time and adds them to its own
    held[0] += weights if split and any(chunks[1:]) else 0
    snapshot("reduce")
    held[0] -= weights if split and any(chunks[1:]) else 0
    for k in range(1, devices):  # the replicas and their chunks are dropped
        held[k] = 0
    snapshot("step")
    return phases


def dp_memory(params: int, batch: int, devices: int, **sizes) -> list[float]:
    """Peak bytes per device during one DataParallel step (the maximum over its phases)."""
    phases = dp_phases(params, batch, devices, **sizes)
    return [max(p[k] for p in phases.values()) for k in range(devices)]


def ddp_memory(
    params: int,
    batch: int,
    devices: int,
    *,
    dtype: str = "float32",
    optimizer: str = "momentum",
    activation_bytes_per_sample: float = 0,
    output_size: int = 1,
    input_size: int = 0,
    label_bytes_per_sample: int = 0,
    bucket_view: bool = False,
) -> list[float]:
    """Peak bytes per rank during one DDP step with global batch ``batch`` over ``devices``.

    Every rank holds the same things: weights, gradients, DDP's gradient buckets (a second
    copy of the gradients, unless ``gradient_as_bucket_view=True``), the optimizer state,
    and only its own share of the batch: input, labels, activations, outputs, what the
    loss saves and the outputs' gradient.
    """
    b, weights, state = _sizes(params, dtype, optimizer)
    _check("activation_bytes_per_sample", activation_bytes_per_sample)
    per_rank = chunk_sizes(batch, devices)
    o, x = output_size * b, input_size * b
    buckets = 0 if bucket_view else weights
    fixed = 2 * weights + buckets + state
    return [
        fixed + c * (x + label_bytes_per_sample + activation_bytes_per_sample + 3 * o)
        for c in per_rank
    ]


# ---------------------------------------------------------------------------------------
# Notebook 11: sharding the state (ZeRO stages 1, 2 and 3) - the same bytes, divided differently.

# ddp; zero (ZeroRedundancyOptimizer: ZeRO stage 1); zero2 (ZeRO stage 2: gradients sharded
# too; FSDP2's fully_shard(..., reshard_after_forward=False), FSDP1's SHARD_GRAD_OP);
# fsdp (FSDP2's fully_shard: ZeRO stage 3)
STRATEGIES = ("ddp", "zero", "zero2", "fsdp")
STATE_KINDS = ("parameters", "gradients", "optimizer", "activations")


def sharded_memory(
    params: float,
    devices: int,
    strategy: str,
    *,
    dtype: str = "float32",
    optimizer: str = "adam",
    activation_bytes: float = 0,
    unit_params: float = 0,
    bucket_view: bool = True,
) -> dict[str, float]:
    """Bytes one rank holds at the peak of a training step, by kind (see ``STATE_KINDS``).

    ``ddp``: everything whole on every rank. Its gradients are views into DDP's all-reduce
    buckets only with ``gradient_as_bucket_view=True`` (``bucket_view``, the default here);
    without it the buckets are a second copy of the gradients (``zero`` likewise: it runs
    on DDP). ``zero`` (ZeroRedundancyOptimizer, ZeRO stage 1): the optimizer state divided
    by ``devices``. ``zero2`` (ZeRO stage 2): the gradients divided too; the parameters are
    whole from forward to the end of backward. ``fsdp`` (FSDP2 ``fully_shard``, ZeRO stage
    3): parameters, gradients and optimizer state divided, plus the one unit that is
    gathered whole while it computes (``unit_params`` parameters and, in backward, their
    gradients). ``activation_bytes``: what autograd saves for this rank's share of the batch.
    """
    b, weights, state = _sizes(params, dtype, optimizer)
    _check("devices", devices, 1)
    _check("activation_bytes", activation_bytes)
    _check("unit_params", unit_params)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}: use one of {', '.join(STRATEGIES)}")
    buckets = 0 if bucket_view else weights  # DDP's buckets, when they are not the gradients
    if strategy == "ddp":
        held = (weights, weights + buckets, state)
    elif strategy == "zero":
        held = (weights, weights + buckets, state / devices)
    elif strategy == "zero2":
        held = (weights, weights / devices, state / devices)
    else:
        unit = unit_params * b if devices > 1 else 0  # one rank: nothing to gather
        held = (weights / devices + unit, weights / devices + unit, state / devices)
    return dict(zip(STATE_KINDS, (*held, activation_bytes), strict=True))


def max_params_that_fit(
    gpu_bytes: float,
    devices: int,
    strategy: str,
    *,
    dtype: str = "float32",
    optimizer: str = "adam",
    activation_bytes: float = 0,
    unit_fraction: float = 0,
    bucket_view: bool = True,
) -> float:
    """The largest parameter count whose state fits in ``gpu_bytes`` per rank (0 if none).

    Per-rank bytes grow linearly with the parameter count (``unit_fraction``: the share of
    the parameters in FSDP's largest unit), so the limit is where the line meets the GPU.
    """
    _check("gpu_bytes", gpu_bytes)
    _check("unit_fraction", unit_fraction)
    if unit_fraction > 1:
        raise ValueError(f"unit_fraction={unit_fraction!r}: use a share between 0 and 1")
    per_param = sum(sharded_memory(1, devices, strategy, dtype=dtype, optimizer=optimizer,
                                   unit_params=unit_fraction,
                                   bucket_view=bucket_view).values())  # fmt: skip
    _check("activation_bytes", activation_bytes)
    return max(0.0, (gpu_bytes - activation_bytes) / per_param)


def comm_per_step(params: float, devices: int, strategy: str, *, dtype: str = "float32",
                  units: int = 1, root_params: float = 0,
                  tensors: int = 0) -> dict[str, tuple[float, int]]:
    """Bytes each rank sends per training step, by collective: ``{name: (bytes, calls)}``.

    Ring formulas, for P bytes of parameters over N ranks: an all-reduce sends
    2 (N-1)/N P per rank; a reduce-scatter or an all-gather (N-1)/N P, half of that.
    ``zero`` adds the broadcast of each updated shard (an all-gather's worth of bytes), in
    one call per parameter tensor where ``tensors`` is given (ZeroRedundancyOptimizer's
    default, ``parameters_as_bucket_view=False``), else one per rank (the bucket view). ``zero2``
    reduce-scatters the gradients and all-gathers the parameters once per step (DDP's
    bytes). ``fsdp`` all-gathers each of its ``units`` before forward and, as it freed them
    after forward, again before backward, except the root unit (``root_params`` of the
    parameters, counted among the ``units``): FSDP2 keeps the root's parameters whole after
    forward, as backward needs them first. Then it reduce-scatters every unit's gradients.
    With one rank nothing is sent.
    """
    b, weights, _ = _sizes(params, dtype, "sgd")
    _check("devices", devices, 1)
    _check("units", units, 1)
    _check("root_params", root_params)
    if root_params > params:
        raise ValueError(f"root_params={root_params!r}: at most params={params!r}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}: use one of {', '.join(STRATEGIES)}")
    share = (devices - 1) / devices * weights
    if strategy == "ddp":
        return {"all-reduce gradients": (2 * share, 1)}
    if strategy == "zero":
        return {"all-reduce gradients": (2 * share, 1),
                "broadcast parameters": (share, tensors or devices)}
    if strategy == "zero2":
        return {"all-gather parameters": (share, units), "reduce-scatter gradients": (share, units)}
    regathered = share * (1 - root_params / params) if params else 0
    return {"all-gather parameters (forward)": (share, units),
            "all-gather parameters (backward)": (regathered, units - (1 if root_params else 0)),
            "reduce-scatter gradients": (share, units)}


def comm_seconds(comm: dict[str, tuple[float, int]], alpha: float, beta: float,
                 devices: int) -> float:
    """Notebook 02's alpha-beta model: an all-reduce of n bytes takes alpha + n / beta.

    Such a call sends 2 (N-1)/N n bytes per rank, so a rank sends at beta * 2 (N-1)/N bytes
    per second; each call also pays alpha. ``comm``: what :func:`comm_per_step` returns.
    """
    _check("alpha", alpha)
    _check("beta", beta, 1e-12)
    _check("devices", devices, 1)
    if devices == 1:
        return 0.0
    rate = beta * 2 * (devices - 1) / devices
    return sum(calls * alpha + sent / rate for sent, calls in comm.values())


# ---------------------------------------------------------------------------------------
# Notebook 12: a transformer over data x tensor x pipeline parallel ranks.

SCHEDULES = ("gpipe", "1f1b")
INDEX_BYTES = 8  # token ids and targets: int64


def transformer_params(hidden: int, layers: int, vocab: int, seq: int) -> dict[str, float]:
    """Parameter counts of notebook 12's model (q, k, v and projection Linears with biases,
    a 4x MLP, pre-norm LayerNorms, learned positions, a separate head without bias):
    ``split`` per block (the matrices tensor parallelism divides: q, k, v, fc with their
    biases, both projections' weights), ``whole`` per block (the norms and the two
    projection biases, kept on every tensor-parallel rank), and ``embed`` and ``head``."""
    for name, value in (("hidden", hidden), ("layers", layers), ("vocab", vocab), ("seq", seq)):
        _check(name, value, 1)
    h = hidden
    return {"split": 12 * h * h + 7 * h, "whole": 6 * h, "embed": (vocab + seq) * h,
            "head": 2 * h + vocab * h, "total": layers * (12 * h * h + 13 * h)
            + (vocab + seq) * h + 2 * h + vocab * h}  # fmt: skip


def block_activations(hidden: int, heads: int, seq: int, micro_batch: float, tp: int = 1) -> float:
    """Values autograd saves in one block's forward for one micro-batch (b samples of s
    tokens, width h, a heads), per tensor-parallel rank:

    - whole on every rank: the block's input, the first norm's output, the input of the
      second norm and its output (4 b s h), the norms' means and inverse deviations (4 b s);
    - split over the ``tp`` ranks: q, k, v, the heads' merged output, the MLP's hidden layer
      before and after GELU (12 b s h), the attention probabilities (a b s^2).
    """
    b, s, h = micro_batch, seq, hidden
    return 4 * b * s * h + 4 * b * s + (12 * b * s * h + heads * b * s * s) / tp


def transformer_memory(*, hidden: int, layers: int, heads: int, seq: int, micro_batch: float,
                       vocab: int, dtype: str = "float32", dp: int = 1, tp: int = 1, pp: int = 1,
                       zero_stage: int = 0, recompute: bool = False, microbatches: int = 1,
                       schedule: str = "1f1b", master_weights: bool = False) -> list[dict]:
    """Bytes per rank, for each pipeline stage: parameters, gradients, AdamW state and the
    activations at the peak of one step (:data:`STATE_KINDS`, plus ``total``).

    ``dp`` data-parallel ranks (each with ``micro_batch`` samples per micro-batch),
    ``tp`` tensor-parallel ranks (Megatron's split: :func:`transformer_params`), ``pp``
    pipeline stages (blocks split as evenly as possible, the embeddings on the first, the
    final norm and head on the last). ``zero_stage`` 1, 2, 3 divides the optimizer state,
    then the gradients, then the parameters over ``dp`` (3 is FSDP). ``master_weights``:
    mixed precision, an fp32 copy of the parameters and fp32 moments beside ``dtype``'s.
    Micro-batches in flight on stage r: all ``microbatches`` under GPipe, at most pp - r
    under 1F1B. ``recompute``: each block keeps only its input, and recomputes the rest in
    backward (one block's activations at a time).
    """
    _check_layout(heads=heads, dp=dp, tp=tp, pp=pp, microbatches=microbatches, layers=layers,
                  micro_batch=micro_batch, dtype=dtype, zero_stage=zero_stage, schedule=schedule)
    n = transformer_params(hidden, layers, vocab, seq)
    b, value = micro_batch, DTYPE_BYTES[dtype]
    block = block_activations(hidden, heads, seq, b, tp)
    stages = []
    for r in range(pp):
        blocks = (r + 1) * layers // pp - r * layers // pp
        first, last = r == 0, r == pp - 1
        params = blocks * (n["split"] / tp + n["whole"]) + first * n["embed"] + last * n["head"]
        kept = blocks * (b * seq * hidden if recompute else block)
        kept += first * b * seq * INDEX_BYTES / value  # the token ids the embedding saves
        # the last stage: the final norm (input, output, statistics), log-softmax, targets
        kept += last * (2 * b * seq * hidden + 2 * b * seq + b * seq * vocab
                        + b * seq * INDEX_BYTES / value)
        in_flight = microbatches if schedule == "gpipe" else min(microbatches, pp - r)
        activations = (in_flight * kept + (block if recompute else 0)) * value
        weights = params * value
        optimizer = params * (12 if master_weights else 2 * value)  # master copy + 2 moments
        held = {"parameters": weights / (dp if zero_stage >= 3 else 1),
                "gradients": weights / (dp if zero_stage >= 2 else 1),
                "optimizer": optimizer / (dp if zero_stage >= 1 else 1),
                "activations": activations}
        stages.append({**held, "total": sum(held.values())})
    return stages


def _check_layout(*, heads, dp, tp, pp, microbatches, layers, micro_batch, dtype, zero_stage,
                  schedule):
    for name, value in (("heads", heads), ("dp", dp), ("tp", tp), ("pp", pp),
                        ("microbatches", microbatches)):
        _check(name, value, 1)
    _check("micro_batch", micro_batch, 0)
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype={dtype!r}: use one of {', '.join(DTYPE_BYTES)}")
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage={zero_stage!r}: use 0 (none), 1, 2 or 3")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule={schedule!r}: use one of {', '.join(SCHEDULES)}")
    if pp > layers:
        raise ValueError(f"pp={pp!r}: at most one stage per block (layers={layers!r})")


def largest_transformer(gpu_bytes: float, *, dp: int = 1, tp: int = 1, pp: int = 1,
                        zero_stage: int = 0, head_dim: int = 128, seq: int = 2048,
                        vocab: int = 50304, micro_batch: int = 1, dtype: str = "bfloat16",
                        master_weights: bool = True, recompute: bool = True,
                        max_layers: int = 512) -> dict[str, float]:
    """The largest model of the GPT-3 family's shape (width 128 x layers, heads of
    ``head_dim``) whose every stage fits in ``gpu_bytes`` per rank, trained with 4 pp
    micro-batches under 1F1B: ``{"layers", "hidden", "params"}`` (zeros if none fits)."""
    _check("gpu_bytes", gpu_bytes)
    best = {"layers": 0, "hidden": 0, "params": 0.0}
    for layers in range(max(1, pp), max_layers + 1):
        hidden = 128 * layers
        stages = transformer_memory(
            hidden=hidden, layers=layers, heads=max(1, hidden // head_dim), seq=seq,
            micro_batch=micro_batch, vocab=vocab, dtype=dtype, dp=dp, tp=tp, pp=pp,
            zero_stage=zero_stage, recompute=recompute, microbatches=4 * pp,
            master_weights=master_weights)
        if max(s["total"] for s in stages) > gpu_bytes:
            break
        best = {"layers": layers, "hidden": hidden,
                "params": transformer_params(hidden, layers, vocab, seq)["total"]}
    return best
