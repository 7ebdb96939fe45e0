"""What notebook 01 alone imports from beside the launchers: its DataParallel ledger and plots
(dp_lab), the GIL race's work (gil_work) and the byte counts its ledger and ddp_same_model.py
share (tensor_bytes). The notebook imports them as `from nb01.dp_lab import Ledger`; what two or
more notebooks share is in launchers/common/.
"""
