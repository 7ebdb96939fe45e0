"""Reference answers for notebook 11's predictions (used only when COURSE_SOLUTIONS is set)."""

import math

# FSDP2 on N GPUs of 80 GiB, 30 GiB of each taken by activations: every GPU holds 16 / N bytes
# per parameter (fp32 weights and gradients, AdamW's two moments), plus the unit it gathers
# whole, 10 % of the parameters with their gradients (8 bytes each). 20e9 parameters fit when
# 20e9 * (16 / N + 0.10 * 8) <= 50 GiB:
gpus_for_20b = math.ceil(20e9 * 16 / (50 * 2**30 - 20e9 * 0.10 * 8))
