"""Reference answers for notebook 11's predictions (used only when COURSE_SOLUTIONS is set)."""

import math

# FSDP2 on N GPUs of 80 GiB, 10 GiB of each taken by activations: every GPU holds 16 / N bytes
# per parameter (fp32 weights and gradients, AdamW's two moments), plus the unit it gathers
# whole, 2 % of the parameters with their gradients (8 bytes each). 20e9 parameters fit when
# 20e9 * (16 / N + 0.02 * 8) <= 70 GiB:
gpus_for_20b = math.ceil(20e9 * 16 / (70 * 2**30 - 20e9 * 0.02 * 8))
