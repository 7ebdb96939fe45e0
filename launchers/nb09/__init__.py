"""What notebook 09's launchers alone import from beside them: the BatchNorm noise floor of
batchnorm_stats.py (batchnorm_noise_floor) and the flags and report of the two sampler
launchers (sampler_shares), as `from nb09.sampler_shares import sampler_parser`. The pitfall
harness it shares with notebook 08 lives in launchers/common/.
"""
