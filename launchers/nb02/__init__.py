"""What notebook 02 alone imports from beside the launchers: the check of its ring exercise
(ring_check), which ring_allreduce.py runs as `from nb02.ring_check import main`. What two or
more notebooks share (allreduce_bench.py's rounds, which notebook 06 runs too) is in
launchers/common/.
"""
