"""TEMPORARY (this session's move, removed before it lands): the memory calculator now lives in
launchers/common/memory.py; this name keeps a notebook edited meanwhile importing it."""
from common.memory import *  # noqa: F401,F403
from common.memory import DTYPE_BYTES, OPTIMIZER_STATES  # noqa: F401
