"""What notebook 04's launchers alone import from beside them: scoring a model on the test set
(scores), which train_step1 to train_step4 import as `from nb04.scores import evaluate`. The
rest of the training chain (data, model, options, logging, records) is shared with notebooks 05
and 11 and lives in launchers/common/.
"""
