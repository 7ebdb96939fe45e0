"""Loaded by every Python process of a run the course's runner starts (its folder is put first
on PYTHONPATH): SIGUSR1 makes the process print where each of its threads stands
(faulthandler, which works while a thread waits inside a C++ collective), so that a run
stopped at its timeout can say where each rank waited. Any other sitecustomize is run after."""

import faulthandler
import importlib.machinery
import importlib.util
import os
import signal
import sys

if hasattr(signal, "SIGUSR1"):
    faulthandler.register(signal.SIGUSR1, all_threads=True)

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _spec is not None and _spec.loader is not None:  # the environment's own, shadowed by this one
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
