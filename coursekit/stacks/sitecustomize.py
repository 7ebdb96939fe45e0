"""Loaded by every Python process of a run the course's runner starts (its folder is put first
on PYTHONPATH):

- SIGUSR1 makes the process print where each of its threads stands (faulthandler, which works
  while a thread waits inside a C++ collective), so that a run stopped at its timeout can say
  where each rank waited;
- stdout and stderr write each line whole, in one call (line-buffered): the runner sets
  PYTHONUNBUFFERED=1 for live output, and unbuffered, print(text) writes the text and its
  newline apart, so torchrun's --tee, reading a rank's file as it grows, could pass on half a
  line and glue another rank's line to it. COURSE_STDOUT=unbuffered keeps plain unbuffered
  output (notebook 08 shows what it does).

Any other sitecustomize is run after."""

import faulthandler
import importlib.machinery
import importlib.util
import os
import signal
import sys

if hasattr(signal, "SIGUSR1"):
    faulthandler.register(signal.SIGUSR1, all_threads=True)
if os.environ.get("COURSE_STDOUT") != "unbuffered":
    for _stream in (sys.stdout, sys.stderr):
        if _stream is not None and hasattr(_stream, "reconfigure"):
            _stream.reconfigure(line_buffering=True, write_through=False)

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _spec is not None and _spec.loader is not None:  # the environment's own, shadowed by this one
    _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
