"""One trace context for every rank, as NeMo Lens's `nemo.lens.distributed` gives it (Megatron-LM imports it):

    carrier = broadcast_trace_context(rank)        # rank 0's current context, on every rank (a dict), or None
    lens.state.set_pp_trace_carrier(carrier)
    span = create_linked_span(tracer, "megatron.pp.recv_forward.linked", remote_carrier=carrier)
    span.end()

broadcast_trace_context is a collective: every rank of the default process group calls it, after
torch.distributed.init_process_group. It sends rank `src_rank`'s W3C carrier as its length and its bytes (two
broadcasts, on the current CUDA device when there is one, as NCCL needs); without torch.distributed initialised it
returns None and sends nothing.
"""

import json

from lens.propagation import create_linked_span, inject

__all__ = ["broadcast_trace_context", "create_linked_span"]


def broadcast_trace_context(rank, src_rank=0):
    """Rank `src_rank`'s trace context (its `inject` carrier) on every rank, as a dict; None when
    torch.distributed is not there or not initialised, or when `src_rank` had no context to send."""
    if not isinstance(rank, int) or not isinstance(src_rank, int):
        raise TypeError("broadcast_trace_context(rank, src_rank=0): ranks are ints")
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return None
    if not dist.is_available() or not dist.is_initialized():
        return None
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    payload = json.dumps(inject({})).encode("utf-8") if rank == src_rank else b""
    length = torch.tensor([len(payload)], dtype=torch.long, device=device)
    dist.broadcast(length, src=src_rank)
    size = int(length.item())
    if size <= 2:  # "{}": the source had no context
        return None
    if rank == src_rank:
        data = torch.tensor(list(payload), dtype=torch.uint8, device=device)
    else:
        data = torch.zeros(size, dtype=torch.uint8, device=device)
    dist.broadcast(data, src=src_rank)
    carrier = json.loads(bytes(data.cpu().tolist()).decode("utf-8"))
    return carrier if isinstance(carrier, dict) else None
