"""What the launchers share and is not their lesson: the data, the models, the tier's device.

torchrun puts a launcher's own folder (launchers/) first on sys.path, so a launcher imports
these as `from common.glyphs import Net`; notebooks put ../launchers on sys.path to do the
same. Plain modules: no torch.distributed set-up happens here, and nothing imports coursekit.
"""
