"""What notebook 10's launcher alone imports from beside it: the data and records every attempt
of multinode_train.py shares (multinode_records), as `from nb10.multinode_records import
log_step`. What two or more notebooks share (devices) is in launchers/common/.
"""
