"""What notebook 05's launchers alone import from beside them: the one-process reference and its
fp32 noise floor of ddp_equivalence.py (reordered_sums), imported as `from nb05.reordered_sums
import train`. The training chain it shares with notebooks 04 and 11 lives in launchers/common/.
"""
