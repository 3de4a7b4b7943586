"""Launch lines of a found plan: Megatron-LM and Megatron-Bridge for training, vLLM and
TensorRT-LLM for serving, as :class:`Launch` objects checked against the real parsers."""

from .bridge import bridge_launch
from .command import Launch
from .megatron import RunSettings, megatron_launch, train_launch_plan
from .serving import serving_launches, trtllm_launch, vllm_launch

__all__ = [
    "Launch",
    "RunSettings",
    "bridge_launch",
    "megatron_launch",
    "serving_launches",
    "train_launch_plan",
    "trtllm_launch",
    "vllm_launch",
]
